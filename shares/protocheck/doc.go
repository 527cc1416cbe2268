// Package protocheck is the deterministic protocol checker: it runs the real
// leader ([shares.Leader], with the real [shares.Allocator]) and the real
// pod-side logic ([shares.Pod]) for several pods per region on simulated
// time and a simulated network, with faults drawn from a seed, and checks
// the budget invariant after every event:
//
//	for every tenant, at every instant:
//	  Σ over regions whose Redis is up of the largest rate any live pod of
//	  the region enforces on its Redis path
//	+ Σ over pods failing open of their fail-open rate
//	≤ the largest budget R in force during the last D (bursts likewise ≤ B)
//
// where D (Config.Allowance) is how long a budget decrease may take to
// reach every pod (a rebalance, a report and a lease). A pod that can learn
// of a decrease from nobody (cut from etcd while no coordinator leads)
// enforces the budget it last read: for it, D runs from when it reaches
// etcd or a leader again. Budget changes that
// keep R (mode, home, floor fraction) and region-set changes are checked
// without allowance.
//
// Faults: message delay, loss, duplication and reordering; partitions of
// each link alone (pod–etcd, pod–coordinator, coordinator–etcd); leader
// crash and resignation; pod restarts and new pods; Redis down per region;
// budget, mode, home and floor changes; replayed and forged reports.
//
// It is pure: no goroutines, no I/O, no wall clock. Run(seed) is
// reproducible; a violation comes with the trace of events that led to it.
package protocheck
