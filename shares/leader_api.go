package shares

// MinEpoch returns the region's minimum epoch: the value a leader puts in the
// Renewal it answers a pod of that region with between two Reports of the
// region (see Renewal.MinEpoch). Unknown regions return 0.
func (a *Allocator) MinEpoch(region string) uint64 {
	i, ok := a.regIdx[region]
	if !ok {
		return 0
	}
	return a.regs[i].minEpoch
}
