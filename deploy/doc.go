// Package deploy holds allot's deployment artifacts, not Go code: the compose
// file (compose/), the Helm chart (helm/allot/), the Grafana dashboard
// (grafana/allot.json), the Prometheus alert rules (prometheus/), the example
// policy, and the image builder (images/, its own package).
//
// Its tests keep those artifacts honest against the code: every allot_*
// metric the dashboard and the alert rules query is one the code registers
// (histograms only through their _bucket, _count and _sum series), every
// label they group or match by is one the code or the scrape attaches, the
// dashboard is well formed, and every alert says what to do. They read files
// only; `make deploy-check` adds helm, promtool and docker compose.
//
// Invariants: a metric renamed in the code fails these tests until the
// dashboard and rules follow. Concurrency: none. Clock: none.
package deploy
