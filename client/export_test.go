package client

// Queued is how many Decide calls wait to be merged into the next RPC (0
// when Coalesce is off).
func Queued(c *Client) int {
	if c.co == nil {
		return 0
	}
	return c.co.Queued()
}

// InFlight is how many coalesced RPCs may be in flight at once.
const InFlight = coalesceFlushers
