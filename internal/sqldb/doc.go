// Package sqldb is what coordkit's SQL packages (sqllock, and the worker-ID
// table of idgen/workerid) share and users need not see: reading the error
// codes of MySQL and PostgreSQL drivers without importing them, the table
// names that may be put into SQL unquoted, and the dialect of a pool's
// driver.
package sqldb
