package fleet

import "time"

// StartWait bounds how long an edge that starts waits for Consul's first
// answer about what the fleet shares (its actions, a pool's cookie keys)
// before it serves with what it has: long enough for a healthy agent,
// short enough that an edge whose Consul is down starts anyway, and takes
// the fleet's settings once Consul answers.
const StartWait = 5 * time.Second
