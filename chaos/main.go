// Command chaos runs coordkit's lock backends in separate client processes
// under a seeded nemesis and checks the histories the clients record.
//
//	chaos -profile short              every backend, short runs (part of make test)
//	chaos -profile long               every backend, long runs (make chaos)
//	chaos -backend zk -seed 7 -dur 30s
//	chaos check DIR                   check the histories of an earlier run again
//
// A client process is this same binary started as "chaos client ...".
package main

import (
	"fmt"
	"os"
)

func main() {
	var err error
	code := 0
	if len(os.Args) > 1 && os.Args[1] == "client" {
		err = runClient(os.Args[2:])
	} else {
		code, err = runMain(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}
