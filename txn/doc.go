// Package txn runs distributed transactions from inside the application,
// with no coordinator server: Saga and TCC global transactions whose log
// lives in the application's own database (MySQL/MariaDB or PostgreSQL),
// and the sub-transaction barrier that makes their branch funcs safe to
// call again.
package txn
