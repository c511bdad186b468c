//go:build !chaosbroken

package main

import "github.com/coordkit/coordkit/lock"

// brokenBuild names what the chaosbroken build breaks ("" here: nothing).
const brokenBuild = ""

// wrapLocker returns l unchanged; the chaosbroken build (broken.go) breaks it.
func wrapLocker(l lock.Locker) lock.Locker { return l }
