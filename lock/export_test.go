package lock

import (
	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/internal/hashlock"
)

// Scripts returns every Lua script the package runs, the hash lock's
// included, by file name: the tests load them and arm faults on them by SHA.
func Scripts() map[string]*redis.Script {
	all := hashlock.Scripts()
	all["simple_obtain.lua"] = simpleObtainScript
	all["simple_release.lua"] = simpleReleaseScript
	all["simple_renew.lua"] = simpleRenewScript
	all["rw_acquire.lua"] = rwAcquireScript
	all["rw_release.lua"] = rwReleaseScript
	all["rw_renew.lua"] = rwRenewScript
	return all
}
