#!/usr/bin/env bash
# make deploy-check: checks everything under deploy/ that CI can check without
# a Kubernetes cluster. Installs what is missing: helm (go install, pinned,
# cached outside the work tree so fresh clones reuse it) and promtool
# (Debian's prometheus package; its service is stopped).
#
#   helm lint --strict and helm template  (default values and deploy/helm/allot/ci/*.yaml)
#   deploycheck                           (rendered manifests decoded into the Kubernetes API types,
#                                          references, security context; ALLOT_ env and flags
#                                          against allot --help; the compose file)
#   go test ./deploy/                     (dashboard and rules query only metrics the code registers)
#   promtool check rules / test rules     (alert rules; the dashboard's queries as recording rules)
#   docker compose config                 (when docker compose or docker-compose exists)
#   allot validate -f deploy/policy.example.yaml
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=${HELM_VERSION:-v3.22.0}
TOOLS_DIR=${ALLOT_TOOLS_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/allot/tools}
HELM="$TOOLS_DIR/helm-$HELM_VERSION/helm"
OUT=bin/deploy-check
CHART=deploy/helm/allot
GO=${GO:-go}

t0=$SECONDS
step() { printf '== %s\n' "$*"; }
took() { printf '   (%ss)\n' "$(( SECONDS - $1 ))"; }
fail() { echo "deploy-check: FAIL: $*" >&2; exit 1; }

mkdir -p "$OUT"

# ---- tools ----
s=$SECONDS
if [ ! -x "$HELM" ]; then
  step "installing helm $HELM_VERSION into $TOOLS_DIR (go install; minutes the first time, cached after)"
  mkdir -p "$(dirname "$HELM")"
  GOBIN="$(cd "$(dirname "$HELM")" && pwd)" GOFLAGS=-mod=mod $GO install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
    || fail "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "installing promtool (Debian package prometheus, without recommends)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } \
      || fail "apt-get install prometheus (for promtool)"
    # Only promtool is wanted: stop the server if the package started it.
    if command -v service >/dev/null 2>&1; then service prometheus stop >/dev/null 2>&1 || true; fi
  else
    fail "promtool not found: apt-get install prometheus (Debian) or put promtool on PATH"
  fi
fi
step "tools: $("$HELM" version --short 2>/dev/null || echo "helm $HELM_VERSION"), $(promtool --version 2>&1 | head -1)"
took $s

# ---- Helm ----
s=$SECONDS
values=("")
for f in "$CHART"/ci/*-values.yaml; do values+=("$f"); done
rendered=()
for v in "${values[@]}"; do
  name=default; args=()
  if [ -n "$v" ]; then name=$(basename "$v" -values.yaml); args=(-f "$v"); fi
  step "helm lint --strict $CHART ${args[*]:-}"
  # The chart's files/ are symlinks into deploy/; helm says so on every load.
  "$HELM" lint --strict "$CHART" "${args[@]}" 2> >(grep -v 'found symbolic link in path' >&2) \
    || fail "helm lint ($name)"
  step "helm template ($name) > $OUT/$name.yaml"
  "$HELM" template allot "$CHART" --namespace allot "${args[@]}" > "$OUT/$name.yaml" \
    2> >(grep -v 'found symbolic link in path' >&2) || fail "helm template ($name)"
  rendered+=("$OUT/$name.yaml")
done
took $s

# ---- allot binary, deploycheck ----
s=$SECONDS
step "go build ./cmd/allot and deploy/deploycheck"
$GO build -o "$OUT/allot" ./cmd/allot
(cd deploy/deploycheck && $GO build -o "../../$OUT/deploycheck" . && $GO test -count=1 ./...)
step "deploycheck (manifests, compose file, flags against allot --help)"
"$OUT/deploycheck" -allot "$OUT/allot" -compose deploy/compose/compose.yaml \
  -dashboard deploy/grafana/allot.json -dashboard-rules "$OUT/dashboard-rules.yaml" "${rendered[@]}"
took $s

# ---- dashboard and rules against the code ----
s=$SECONDS
step "go test ./deploy/ (every allot_* metric and label the dashboard and rules use exists in the code)"
$GO test -count=1 ./deploy/
step "promtool check rules / test rules"
promtool check rules deploy/prometheus/allot-rules.yaml
# The dashboard's queries, as recording rules: promtool parses every one.
promtool check rules "$OUT/dashboard-rules.yaml"
(cd deploy/prometheus && promtool test rules allot-rules.test.yaml)
took $s

# ---- compose ----
s=$SECONDS
compose=()
if docker compose version >/dev/null 2>&1; then compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then compose=(docker-compose)
fi
if [ ${#compose[@]} -gt 0 ]; then
  step "${compose[*]} -f deploy/compose/compose.yaml config"
  "${compose[@]}" -f deploy/compose/compose.yaml config -q || fail "compose config"
  step "${compose[*]} -f deploy/compose/compose.yaml -f deploy/compose/compose.shards.yaml config"
  "${compose[@]}" -f deploy/compose/compose.yaml -f deploy/compose/compose.shards.yaml config -q || fail "compose config (two shards)"
else
  step "compose config: skipped (neither 'docker compose' nor docker-compose is installed)"
fi
took $s

# ---- example policy ----
step "allot validate -f deploy/policy.example.yaml"
"$OUT/allot" validate -f deploy/policy.example.yaml

echo "deploy-check: ok in $(( SECONDS - t0 ))s"
