// Command transfer moves money between alice's account in MariaDB and
// bob's in PostgreSQL with package txn, once by each mode: a Saga (debit,
// then credit, each behind the sub-transaction barrier), TCC (Try freezes
// the debit and announces the credit, Confirm moves them, Cancel releases
// them) and XA (both updates prepared in the databases' own prepared
// transactions, then committed). The global transactions' log lives in
// MariaDB; there is no coordinator server.
//
// Each mode runs three transfers and prints the balances and their total
// after each one:
//
//   - alice to bob, within her balance: committed;
//   - alice to bob, more than her balance: refused by the debit (insufficient
//     funds), aborted, nothing moved;
//   - alice to carol, who has no account: refused by the credit after the
//     debit was applied (Saga) or frozen (TCC) or prepared (XA), which is
//     then compensated, cancelled or rolled back.
//
// The total never changes, and it fails (exit 1) if it did or if a
// transfer did not end as described.
//
// With no -mysql / -postgres it starts MariaDB and PostgreSQL on loopback
// in a temporary directory and stops them when it ends. A PostgreSQL given
// with -postgres needs max_prepared_transactions > 0 (0 by default) for XA.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	var c config
	flag.StringVar(&c.mysql, "mysql", "", "MariaDB/MySQL DSN: alice's account and the log (default: start MariaDB)")
	flag.StringVar(&c.postgres, "postgres", "", "PostgreSQL URL: bob's account (default: start PostgreSQL)")
	flag.Int64Var(&c.balance, "balance", 1000, "alice's and bob's opening balance")
	flag.Int64Var(&c.amount, "amount", 100, "amount of each transfer that succeeds")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := run(ctx, c)
	if rep != nil {
		rep.print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "transfer:", err)
		os.Exit(1)
	}
	if !rep.passed() {
		os.Exit(1)
	}
}
