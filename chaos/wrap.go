//go:build !chaosbroken

package main

import "github.com/coordkit/coordkit/lock"

// brokenBuild names what the chaosbroken build breaks ("" here: nothing).
const brokenBuild = ""

// brokenIDs is set in the chaosbroken build: the ids workload answers a
// clock step back with a fresh generator on the same worker ID.
const brokenIDs = false

// wrapLocker returns l unchanged; the chaosbroken build (broken.go) breaks it.
func wrapLocker(l lock.Locker) lock.Locker { return l }
