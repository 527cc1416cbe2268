package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A minimal Deployment and Service that pass every check; the table
// changes one thing at a time.
const goodManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: r-allot-us-east
  namespace: ns
  labels: {app: allot}
spec:
  selector:
    matchLabels: {app: allot, region: us-east}
  template:
    metadata:
      labels: {app: allot, region: us-east}
    spec:
      securityContext: {runAsNonRoot: true}
      containers:
        - name: regional
          image: allot:dev
          args: [regional]
          env:
            - name: POD_IP
              valueFrom: {fieldRef: {fieldPath: status.podIP}}
            - name: ALLOT_GOSSIP_ADVERTISE
              value: "$(POD_IP):7946"
          ports:
            - {name: http, containerPort: 8080}
          readinessProbe:
            httpGet: {path: /readyz, port: http}
          resources:
            requests: {cpu: 10m}
          securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}
          volumeMounts:
            - {name: tls, mountPath: /etc/allot/tls}
      volumes:
        - name: tls
          secret: {secretName: tls}
---
apiVersion: v1
kind: Service
metadata:
  name: r-allot-us-east
  namespace: ns
spec:
  selector: {app: allot, region: us-east}
  ports:
    - {name: http, port: 8080, targetPort: http}
`

const regionalHelp = `Run one limiter pod.

Usage:
  allot regional [flags]

Flags:
      --gossip-advertise string   IP or IP:port
  -h, --help                      help for regional
      --region string             this pod's region
`

func TestManifestChecks(t *testing.T) {
	tests := []struct {
		name     string
		old, new string // replace old with new in goodManifest
		want     string // a problem containing this; "" for none
	}{
		{"good", "", "", ""},
		{"misspelt field", "readinessProbe:", "readinesProbe:", `unknown field "readinesProbe"`},
		{"duplicate key (missing ---)", "---\n", "", `already set in map`},
		{"selector misses template", "matchLabels: {app: allot, region: us-east}", "matchLabels: {app: allot, region: eu-west}", "does not select its own pod template"},
		{"service selects nothing", "selector: {app: allot, region: us-east}\n  ports", "selector: {app: allot, region: ap-south}\n  ports", "selects no rendered workload"},
		{"service targetPort", "targetPort: http", "targetPort: grpc", `targetPort "grpc" is not a port`},
		{"probe port", "port: http}", "port: metrics}", `port "metrics" is not a port of the container`},
		{"exec probe", "httpGet: {path: /readyz, port: http}", "exec: {command: [/bin/sh, -c, 'true']}", "exec probes need a shell"},
		{"volume", "- {name: tls, mountPath", "- {name: tsl, mountPath", "volumeMount tsl: no such volume"},
		{"env order", "value: \"$(POD_IP):7946\"", "value: \"$(POD_IPS):7946\"", "$(POD_IPS), which is not defined before it"},
		{"root", "securityContext: {runAsNonRoot: true}", "securityContext: {}", "runAsNonRoot must be true"},
		{"writable root", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem: true"},
		{"requests", "requests: {cpu: 10m}", "limits: {cpu: 10m}", "no resource requests"},
		{"bad label", "labels: {app: allot}", "labels: {app: allot!}", "app=\"allot!\""},
		{"service name", "kind: Service\nmetadata:\n  name: r-allot-us-east", "kind: Service\nmetadata:\n  name: 1-allot", "name: a DNS-1035 label"},
		{"allot env without a flag", "ALLOT_GOSSIP_ADVERTISE", "ALLOT_GOSSIP_ADVERTISED", "env ALLOT_GOSSIP_ADVERTISED: allot regional has no flag --gossip-advertised"},
		{"allot flag", "args: [regional]", "args: [regional, --regoin, x]", "--regoin: allot regional has no such flag"},
		{"unexpected kind", "kind: Service\n", "kind: Ingress\n", "not a kind this chart is expected to render"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := goodManifest
			if tt.old != "" {
				if !strings.Contains(doc, tt.old) {
					t.Fatalf("the manifest has no %q", tt.old)
				}
				doc = strings.Replace(doc, tt.old, tt.new, 1)
			}
			path := filepath.Join(t.TempDir(), "rendered.yaml")
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			c := &checker{allot: "allot-not-run", help: map[string]map[string]bool{"regional": parseHelp(regionalHelp)}}
			c.manifestFile(path)
			assertProblems(t, c.problems, tt.want)
		})
	}
}

const goodCompose = `x-allot: &allot
  image: ${ALLOT_IMAGE_FOR_TEST:-allot:dev}
services:
  redis:
    image: allot-redis:dev
    networks: [us-east]
  pod:
    <<: *allot
    command: ["regional", "--region", "us-east"]
    environment:
      ALLOT_GOSSIP_ADVERTISE: 10.0.0.1
    networks: [backbone, us-east]
    depends_on:
      redis: {condition: service_started}
    secrets: [token]
    volumes: ["data:/var/lib/x", "./file:/etc/file:ro"]
    healthcheck:
      test: ["CMD", "/allot", "status"]
networks:
  backbone: {}
  us-east: {internal: true}
volumes:
  data: {}
secrets:
  token: {file: ./token}
`

func TestComposeChecks(t *testing.T) {
	tests := []struct {
		name, old, new, want string
	}{
		{"good", "", "", ""},
		{"network", "[backbone, us-east]", "[backbone, us-eats]", "network us-eats is not declared"},
		{"depends_on", "redis: {condition", "rdis: {condition", "depends on rdis"},
		{"secret", "secrets: [token]", "secrets: [tokn]", "secret tokn is not declared"},
		{"volume", `"data:/var/lib/x"`, `"dat:/var/lib/x"`, "volume dat is not declared"},
		{"shell health check", `["CMD", "/allot", "status"]`, `["CMD-SHELL", "curl -f localhost"]`, "needs a shell"},
		{"flag through the merge key", `"--region"`, `"--regoin"`, "--regoin: allot regional has no such flag"},
		{"env", "ALLOT_GOSSIP_ADVERTISE:", "ALLOT_GOSIP_ADVERTISE:", "no flag --gosip-advertise"},
		{"no image", "image: allot-redis:dev\n", "", "service redis: no image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := goodCompose
			if tt.old != "" {
				if !strings.Contains(doc, tt.old) {
					t.Fatalf("the compose file has no %q", tt.old)
				}
				doc = strings.Replace(doc, tt.old, tt.new, 1)
			}
			path := filepath.Join(t.TempDir(), "compose.yaml")
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			c := &checker{allot: "allot-not-run", help: map[string]map[string]bool{"regional": parseHelp(regionalHelp)}}
			c.composeFile(path)
			assertProblems(t, c.problems, tt.want)
			if c.composeServices != 2 && tt.want == "" {
				t.Errorf("checked %d services, want 2", c.composeServices)
			}
		})
	}
}

func assertProblems(t *testing.T, problems []string, want string) {
	t.Helper()
	if want == "" {
		if len(problems) > 0 {
			t.Fatalf("problems = %q, want none", problems)
		}
		return
	}
	for _, p := range problems {
		if strings.Contains(p, want) {
			return
		}
	}
	t.Fatalf("problems = %q, want one containing %q", problems, want)
}

func TestParseHelp(t *testing.T) {
	got := parseHelp(regionalHelp + "\nGlobal Flags:\n  -f, --file string   a file\n")
	for _, f := range []string{"gossip-advertise", "help", "h", "region", "file", "f"} {
		if !got[f] {
			t.Errorf("parseHelp: no %q in %v", f, got)
		}
	}
	if got["allot"] || got["regional"] || len(got) != 6 {
		t.Errorf("parseHelp = %v, want exactly the 6 flag names", got)
	}
}

func TestIsAllotImage(t *testing.T) {
	for image, want := range map[string]bool{
		"allot:dev": true, "allot": true, "registry.example.com:5000/team/allot:1.2": true,
		"allot@sha256:abc": true, "allot-redis:dev": false, "allot-etcd": false, "x/allotment:1": false,
	} {
		if got := isAllotImage(image); got != want {
			t.Errorf("isAllotImage(%q) = %v, want %v", image, got, want)
		}
	}
}

func TestDashboardRules(t *testing.T) {
	dir := t.TempDir()
	dash := filepath.Join(dir, "d.json")
	out := filepath.Join(dir, "rules.yaml")
	const d = `{"panels":[{"type":"row","title":"r","panels":[
	  {"title":"a","targets":[{"expr":"sum by (region) (rate(allot_decisions_total{region=~\"$region\"}[$__rate_interval]))"}]}]},
	  {"title":"b","targets":[{"expr":"sum(increase(allot_coordinator_terms_total[$__range]))"}]}]}`
	if err := os.WriteFile(dash, []byte(d), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &checker{}
	c.dashboardRules(dash, out)
	assertProblems(t, c.problems, "")
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`expr: "sum by (region) (rate(allot_decisions_total{region=~\".*\"}[1m]))"`,
		`expr: "sum(increase(allot_coordinator_terms_total[1h]))"`,
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("rule file lacks %s:\n%s", want, got)
		}
	}
	if c.dashboardQueries != 2 {
		t.Errorf("%d queries written, want 2", c.dashboardQueries)
	}

	if err := os.WriteFile(dash, []byte(`{"panels":[{"title":"x","targets":[{"expr":"rate(x[$__step])"}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c = &checker{}
	c.dashboardRules(dash, out)
	assertProblems(t, c.problems, "uses a variable this check does not know")
}
