-- fields: the lock hash's reserved fields, the first helper of the hash
-- lock's scripts in the library (see internal/redisfn). Constants only.

local GRANT = '\0grant'

-- Reserved hash fields (owners may not start with a NUL byte):
--   TOKEN          the fencing token of the hold (set when it is created;
--                  re-entry answers it, renew and release check it)
--   LEVEL .. id    one per hold level: the id of the call that took it, "1"
--                  if that was the hold's fresh acquisition, "0" re-entry.
--                  A call sent again (its reply was lost and go-redis or
--                  the caller retried) finds its level and takes no other.
--   PREV           the id of the level a hand-off released to make this hold
--   META           the holder's metadata (lock.WithHolderMeta): set with
--                  the hold by a fresh acquisition, a hand-off, or a grant
--                  (from the waiter's entry in the waiter-metadata hash)
--   WAITING        "1": a waiter may be queued, so the outermost release
--                  looks at the queue (pass). Set by every waiter that
--                  queues while the hash exists, and on every hold made by
--                  a grant or taken by a waiter that was queued (others may
--                  be queued behind it); a release of a hash without it
--                  deletes the hash and reads no queue.
--                  (A waiter queued while no hash existed, after a holder's
--                  key expired, and not seen by the next holder's creation,
--                  tries again on its own timer, as after a lost message.)
local TOKEN, LEVEL, PREV, WAITING, META = '\0t', '\0l:', '\0p', '\0w', '\0m'

