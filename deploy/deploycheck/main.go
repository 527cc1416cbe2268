// Command deploycheck checks allot's deployment files beyond what helm lint
// and docker compose config see:
//
//	deploycheck [-allot bin/allot] [-compose deploy/compose/compose.yaml] RENDERED.yaml...
//
// Each rendered Kubernetes document is decoded strictly into its API type
// (an unknown or misspelt field fails), and checked: names and labels valid,
// selectors that select the pod template, Services, PodDisruptionBudgets and
// StatefulSets pointing at something rendered, volume mounts and probe ports
// that exist, $(VAR) references defined before use, non-root read-only
// containers with resource requests. With -allot, every ALLOT_<FLAG>
// environment variable and --flag of an allot container (chart or compose)
// must be a flag of that allot subcommand, as its --help lists them. In the
// compose file, health checks must not need a shell (the images have none).
//
// It is its own module so that allot's go.mod never carries the Kubernetes
// API types; their versions are helm v3.22's, so the build reuses helm's.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func main() {
	allot := flag.String("allot", "", "allot binary whose --help lists the flags (empty: skip the flag checks)")
	compose := flag.String("compose", "", "compose file to check (empty: none)")
	dashboard := flag.String("dashboard", "", "Grafana dashboard whose queries to write as a rule file (with -dashboard-rules)")
	dashRules := flag.String("dashboard-rules", "", "write the dashboard's queries here as recording rules, Grafana variables substituted, for promtool check rules")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: deploycheck [-allot BIN] [-compose FILE] RENDERED.yaml...")
		flag.PrintDefaults()
	}
	flag.Parse()
	c := &checker{allot: *allot, help: map[string]map[string]bool{}}
	for _, f := range flag.Args() {
		c.manifestFile(f)
	}
	if *compose != "" {
		c.composeFile(*compose)
	}
	if *dashboard != "" && *dashRules != "" {
		c.dashboardRules(*dashboard, *dashRules)
	}
	for _, p := range c.problems {
		fmt.Fprintln(os.Stderr, "deploycheck:", p)
	}
	kinds := make([]string, 0, len(c.kinds))
	for k, n := range c.kinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	fmt.Printf("deploycheck: %d documents (%s), %d allot containers checked against --help, %d compose services, %d dashboard queries written; %d problems\n",
		c.docs, strings.Join(kinds, ", "), c.flagChecked, c.composeServices, c.dashboardQueries, len(c.problems))
	if len(c.problems) > 0 || (flag.NArg() == 0 && *compose == "" && *dashRules == "") {
		os.Exit(1)
	}
}

type checker struct {
	allot    string
	help     map[string]map[string]bool // subcommand path -> flag names
	problems []string

	docs, flagChecked, composeServices int
	dashboardQueries                   int
	kinds                              map[string]int
	objects                            []object
}

// object is one decoded document of one file.
type object struct {
	file, kind, name, namespace string
	podLabels                   map[string]string // workloads: the pod template's labels
	ports                       map[string]bool   // workloads: container port names
	obj                         any
}

func (c *checker) errorf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// manifestFile decodes every document of a rendered file, then checks the
// references between them.
func (c *checker) manifestFile(path string) {
	if c.kinds == nil {
		c.kinds = map[string]int{}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		c.errorf("%v", err)
		return
	}
	c.objects = c.objects[:0]
	before := len(c.problems)
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			c.errorf("%s: document %d: %v", path, i, err)
			return
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		c.document(path, i, doc)
	}
	if len(c.problems) > before {
		// References to objects that failed to decode would only repeat
		// the problems above.
		return
	}
	c.crossReferences()
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}

func (c *checker) document(path string, i int, doc []byte) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		c.errorf("%s: document %d: %v", path, i, err)
		return
	}
	var tm struct {
		metav1.TypeMeta
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(js, &tm); err != nil {
		c.errorf("%s: document %d: %v", path, i, err)
		return
	}
	where := fmt.Sprintf("%s: %s %s", path, tm.Kind, tm.Metadata.Name)
	if tm.APIVersion == "" || tm.Kind == "" || tm.Metadata.Name == "" {
		c.errorf("%s: document %d: apiVersion, kind and metadata.name are required", path, i)
		return
	}
	c.docs++
	c.kinds[tm.Kind]++
	var obj any
	switch tm.APIVersion + "/" + tm.Kind {
	case "apps/v1/Deployment":
		obj = &appsv1.Deployment{}
	case "apps/v1/StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "batch/v1/Job":
		obj = &batchv1.Job{}
	case "v1/Service":
		obj = &corev1.Service{}
	case "v1/ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1/Secret":
		obj = &corev1.Secret{}
	case "v1/ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "policy/v1/PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule":
		// No typed check: the prometheus-operator types are not worth a
		// dependency; the structure is checked by name below.
		obj = &map[string]any{}
	default:
		c.errorf("%s: %s is not a kind this chart is expected to render", where, tm.APIVersion+"/"+tm.Kind)
		return
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		c.errorf("%s: %v", where, err)
		return
	}
	c.meta(where, tm.Kind, tm.Metadata)
	o := object{file: path, kind: tm.Kind, name: tm.Metadata.Name, namespace: tm.Metadata.Namespace, obj: obj}
	for _, prev := range c.objects {
		if prev.kind == o.kind && prev.name == o.name && prev.namespace == o.namespace {
			c.errorf("%s: rendered twice", where)
		}
	}
	switch v := obj.(type) {
	case *appsv1.Deployment:
		c.workload(where, v.Spec.Selector, &v.Spec.Template, nil, &o)
	case *appsv1.StatefulSet:
		var claims []string
		for _, pvc := range v.Spec.VolumeClaimTemplates {
			claims = append(claims, pvc.Name)
		}
		c.workload(where, v.Spec.Selector, &v.Spec.Template, claims, &o)
	case *batchv1.Job:
		c.podSpec(where, &v.Spec.Template.Spec, nil, &o)
	case *map[string]any:
		c.monitoring(where, tm.Kind, *v)
	}
	c.objects = append(c.objects, o)
}

func (c *checker) meta(where, kind string, m metav1.ObjectMeta) {
	valid := validation.IsDNS1123Subdomain
	if kind == "Service" {
		valid = validation.IsDNS1035Label
	}
	for _, e := range valid(m.Name) {
		c.errorf("%s: name: %s", where, e)
	}
	c.labels(where+": metadata.labels", m.Labels)
}

func (c *checker) labels(where string, ls map[string]string) {
	for k, v := range ls {
		for _, e := range validation.IsQualifiedName(k) {
			c.errorf("%s: key %q: %s", where, k, e)
		}
		for _, e := range validation.IsValidLabelValue(v) {
			c.errorf("%s: %s=%q: %s", where, k, v, e)
		}
	}
}

// workload checks a Deployment's or StatefulSet's selector and pod
// template; claims are a StatefulSet's volume claim templates.
func (c *checker) workload(where string, sel *metav1.LabelSelector, tpl *corev1.PodTemplateSpec, claims []string, o *object) {
	c.labels(where+": pod template labels", tpl.Labels)
	s, err := metav1.LabelSelectorAsSelector(sel)
	switch {
	case err != nil:
		c.errorf("%s: selector: %v", where, err)
	case s.Empty():
		c.errorf("%s: empty selector", where)
	case !s.Matches(labels.Set(tpl.Labels)):
		c.errorf("%s: selector %s does not select its own pod template %v", where, s, tpl.Labels)
	}
	o.podLabels = tpl.Labels
	c.podSpec(where, &tpl.Spec, claims, o)
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func (c *checker) podSpec(where string, spec *corev1.PodSpec, claims []string, o *object) {
	o.ports = map[string]bool{}
	vols := map[string]bool{}
	for _, n := range claims {
		vols[n] = true
	}
	for _, v := range spec.Volumes {
		vols[v.Name] = true
	}
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		c.errorf("%s: pod securityContext.runAsNonRoot must be true", where)
	}
	for _, ctr := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		cw := fmt.Sprintf("%s: container %s", where, ctr.Name)
		if ctr.Image == "" {
			c.errorf("%s: no image", cw)
		}
		ports := map[string]bool{}
		for _, p := range ctr.Ports {
			if p.Name != "" {
				if ports[p.Name] {
					c.errorf("%s: port name %s used twice", cw, p.Name)
				}
				ports[p.Name] = true
				o.ports[p.Name] = true
				for _, e := range validation.IsValidPortName(p.Name) {
					c.errorf("%s: port %s: %s", cw, p.Name, e)
				}
			}
		}
		for _, pr := range []struct {
			name string
			p    *corev1.Probe
		}{{"livenessProbe", ctr.LivenessProbe}, {"readinessProbe", ctr.ReadinessProbe}, {"startupProbe", ctr.StartupProbe}} {
			if pr.p == nil {
				continue
			}
			var port *string
			switch {
			case pr.p.HTTPGet != nil:
				port = portName(pr.p.HTTPGet.Port.StrVal)
			case pr.p.TCPSocket != nil:
				port = portName(pr.p.TCPSocket.Port.StrVal)
			case pr.p.Exec != nil:
				c.errorf("%s: %s: exec probes need a shell or tool the images do not have", cw, pr.name)
			}
			if port != nil && !ports[*port] {
				c.errorf("%s: %s: port %q is not a port of the container", cw, pr.name, *port)
			}
		}
		for _, m := range ctr.VolumeMounts {
			if !vols[m.Name] {
				c.errorf("%s: volumeMount %s: no such volume", cw, m.Name)
			}
		}
		defined := map[string]bool{}
		for _, e := range ctr.Env {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				c.errorf("%s: env %s: %s", cw, e.Name, msg)
			}
			if defined[e.Name] {
				c.errorf("%s: env %s set twice", cw, e.Name)
			}
			for _, m := range varRef.FindAllStringSubmatch(e.Value, -1) {
				if !defined[m[1]] {
					c.errorf("%s: env %s refers to $(%s), which is not defined before it", cw, e.Name, m[1])
				}
			}
			defined[e.Name] = true
		}
		if sc := ctr.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			c.errorf("%s: securityContext must set readOnlyRootFilesystem: true and allowPrivilegeEscalation: false", cw)
		}
		if len(ctr.Resources.Requests) == 0 {
			c.errorf("%s: no resource requests", cw)
		}
		if isAllotImage(ctr.Image) {
			env := map[string]string{}
			for _, e := range ctr.Env {
				env[e.Name] = e.Value
			}
			c.allotFlags(cw, append(append([]string{}, ctr.Command...), ctr.Args...), env)
		}
	}
}

func portName(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// crossReferences checks what points at what within one rendered file.
func (c *checker) crossReferences() {
	for _, o := range c.objects {
		where := fmt.Sprintf("%s: %s %s", o.file, o.kind, o.name)
		switch v := o.obj.(type) {
		case *corev1.Service:
			if len(v.Spec.Selector) == 0 {
				c.errorf("%s: no selector", where)
				continue
			}
			w := c.selects(labels.SelectorFromSet(v.Spec.Selector), o.namespace)
			if w == nil {
				c.errorf("%s: selector %v selects no rendered workload", where, v.Spec.Selector)
				continue
			}
			for _, p := range v.Spec.Ports {
				if p.TargetPort.StrVal != "" && !w.ports[p.TargetPort.StrVal] {
					c.errorf("%s: port %s: targetPort %q is not a port of %s %s", where, p.Name, p.TargetPort.StrVal, w.kind, w.name)
				}
			}
		case *policyv1.PodDisruptionBudget:
			s, err := metav1.LabelSelectorAsSelector(v.Spec.Selector)
			if err != nil || c.selects(s, o.namespace) == nil {
				c.errorf("%s: selector selects no rendered workload", where)
			}
		case *appsv1.StatefulSet:
			if !c.has("Service", v.Spec.ServiceName, o.namespace) {
				c.errorf("%s: serviceName %q is not a rendered Service", where, v.Spec.ServiceName)
			}
		}
	}
}

func (c *checker) selects(s labels.Selector, ns string) *object {
	for i := range c.objects {
		w := &c.objects[i]
		if w.podLabels != nil && w.namespace == ns && s.Matches(labels.Set(w.podLabels)) {
			return w
		}
	}
	return nil
}

func (c *checker) has(kind, name, ns string) bool {
	for _, o := range c.objects {
		if o.kind == kind && o.name == name && o.namespace == ns {
			return true
		}
	}
	return false
}

func (c *checker) monitoring(where, kind string, m map[string]any) {
	spec, _ := m["spec"].(map[string]any)
	switch kind {
	case "ServiceMonitor":
		eps, _ := spec["endpoints"].([]any)
		if len(eps) == 0 {
			c.errorf("%s: no endpoints", where)
		}
	case "PrometheusRule":
		groups, _ := spec["groups"].([]any)
		if len(groups) == 0 {
			c.errorf("%s: no rule groups", where)
		}
	}
}

func isAllotImage(image string) bool {
	repo := image
	if i := strings.LastIndex(repo, "@"); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return repo == "allot" || strings.HasSuffix(repo, "/allot")
}

// allotFlags checks an allot container's arguments and ALLOT_ environment
// against the subcommand's --help.
func (c *checker) allotFlags(where string, args []string, env map[string]string) {
	if c.allot == "" {
		return
	}
	if len(args) > 0 && strings.HasSuffix(args[0], "/allot") {
		args = args[1:] // an explicit entry point
	}
	var path []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		path = append(path, a)
	}
	if len(path) == 0 {
		c.errorf("%s: no allot subcommand in %q", where, args)
		return
	}
	flags, err := c.flagsOf(path)
	if err != nil {
		c.errorf("%s: %v", where, err)
		return
	}
	c.flagChecked++
	for _, a := range args[len(path):] {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name := strings.TrimLeft(a, "-")
		if i := strings.IndexByte(name, '='); i >= 0 {
			name = name[:i]
		}
		if !flags[name] {
			c.errorf("%s: %s: allot %s has no such flag", where, a, strings.Join(path, " "))
		}
	}
	for k := range env {
		name, ok := strings.CutPrefix(k, "ALLOT_")
		if !ok {
			continue
		}
		flagName := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		if !flags[flagName] {
			c.errorf("%s: env %s: allot %s has no flag --%s", where, k, strings.Join(path, " "), flagName)
		}
	}
}

var helpFlag = regexp.MustCompile(`^\s+(?:-([a-zA-Z]), )?--([a-z0-9][a-z0-9-]*)`)

// flagsOf runs `allot PATH... --help` once per path and returns its flags.
func (c *checker) flagsOf(path []string) (map[string]bool, error) {
	key := strings.Join(path, " ")
	if f, ok := c.help[key]; ok {
		return f, nil
	}
	cmd := exec.Command(c.allot, append(append([]string{}, path...), "--help")...)
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s --help: %w", c.allot, key, err)
	}
	flags := parseHelp(string(out))
	if len(flags) < 2 {
		return nil, fmt.Errorf("%s %s --help lists no flags: is %q a subcommand?", c.allot, key, key)
	}
	c.help[key] = flags
	return flags, nil
}

// parseHelp returns the flags (long and short names) that cobra's --help
// lists under Flags: and Global Flags:.
func parseHelp(out string) map[string]bool {
	flags := map[string]bool{}
	inFlags := false
	for _, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, "Flags:") { // Flags: and Global Flags:
			inFlags = true
			continue
		}
		if inFlags {
			if m := helpFlag.FindStringSubmatch(line); m != nil {
				flags[m[2]] = true
				if m[1] != "" {
					flags[m[1]] = true
				}
			}
		}
	}
	return flags
}

// cleanEnv is the environment without ALLOT_ variables, so --help cannot
// fail on a bad one.
func cleanEnv() []string {
	var out []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ALLOT_") {
			out = append(out, e)
		}
	}
	return out
}

var interp = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}`)

// composeFile checks a compose file: references between services, networks,
// volumes and secrets; health checks without a shell; allot flags.
func (c *checker) composeFile(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		c.errorf("%v", err)
		return
	}
	// ${VAR:-default} as compose would expand it with VAR unset.
	data = interp.ReplaceAllFunc(data, func(m []byte) []byte {
		sm := interp.FindSubmatch(m)
		if v, ok := os.LookupEnv(string(sm[1])); ok {
			return []byte(v)
		}
		return sm[2]
	})
	js, err := yaml.YAMLToJSON(data) // merge keys (<<) resolved
	if err != nil {
		c.errorf("%s: %v", path, err)
		return
	}
	var f struct {
		Services map[string]composeService `json:"services"`
		Networks map[string]any            `json:"networks"`
		Volumes  map[string]any            `json:"volumes"`
		Secrets  map[string]any            `json:"secrets"`
	}
	if err := json.Unmarshal(js, &f); err != nil {
		c.errorf("%s: %v", path, err)
		return
	}
	if len(f.Services) == 0 {
		c.errorf("%s: no services", path)
	}
	names := make([]string, 0, len(f.Services))
	for n := range f.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := f.Services[n]
		c.composeServices++
		where := fmt.Sprintf("%s: service %s", path, n)
		if s.Image == "" {
			c.errorf("%s: no image", where)
		}
		for _, nw := range s.networkNames() {
			if _, ok := f.Networks[nw]; !ok && nw != "default" {
				c.errorf("%s: network %s is not declared", where, nw)
			}
		}
		for dep := range s.DependsOn {
			if _, ok := f.Services[dep]; !ok {
				c.errorf("%s: depends on %s, which is not a service", where, dep)
			}
		}
		for _, sec := range s.Secrets {
			if _, ok := f.Secrets[sec]; !ok {
				c.errorf("%s: secret %s is not declared", where, sec)
			}
		}
		for _, v := range s.Volumes {
			src, _, ok := strings.Cut(v, ":")
			if ok && !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
				if _, ok := f.Volumes[src]; !ok {
					c.errorf("%s: volume %s is not declared", where, src)
				}
			}
		}
		if hc := s.Healthcheck; hc != nil && len(hc.Test) > 0 && hc.Test[0] != "CMD" && hc.Test[0] != "NONE" {
			c.errorf("%s: healthcheck %q needs a shell; the images have none: use [\"CMD\", ...]", where, hc.Test)
		}
		if isAllotImage(s.Image) {
			c.allotFlags(where, s.Command, s.Environment)
		}
	}
}

type composeService struct {
	Image       string            `json:"image"`
	Command     []string          `json:"command"`
	Environment map[string]string `json:"environment"`
	Networks    json.RawMessage   `json:"networks"`
	DependsOn   map[string]any    `json:"depends_on"`
	Secrets     []string          `json:"secrets"`
	Volumes     []string          `json:"volumes"`
	Healthcheck *struct {
		Test []string `json:"test"`
	} `json:"healthcheck"`
}

func (s composeService) networkNames() []string {
	var list []string
	if json.Unmarshal(s.Networks, &list) == nil {
		return list
	}
	var m map[string]any
	if json.Unmarshal(s.Networks, &m) == nil {
		for k := range m {
			list = append(list, k)
		}
	}
	return list
}

// grafanaVars are the dashboard variables and what stands in for them when
// its queries are checked as PromQL.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h",
	"${region}", ".*", "$region", ".*", "${limit}", ".*", "$limit", ".*",
)

// dashboardRules writes every query of a Grafana dashboard as a recording
// rule, so promtool can parse them; it reports a query that still holds a
// variable it does not know.
func (c *checker) dashboardRules(path, out string) {
	data, err := os.ReadFile(path)
	if err != nil {
		c.errorf("%v", err)
		return
	}
	var d struct {
		Panels []dashPanel `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		c.errorf("%s: %v", path, err)
		return
	}
	var exprs []string
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, t := range p.Targets {
				e := grafanaVars.Replace(t.Expr)
				if strings.Contains(e, "$") {
					c.errorf("%s: panel %q: query %q uses a variable this check does not know", path, p.Title, t.Expr)
					continue
				}
				exprs = append(exprs, e)
			}
		}
	}
	walk(d.Panels)
	if len(exprs) == 0 {
		c.errorf("%s: no queries", path)
		return
	}
	var b strings.Builder
	b.WriteString("# Generated by deploycheck from " + path + ": every panel query as a recording rule.\ngroups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(e) // a JSON string is a YAML double-quoted string
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %s\n", i, q)
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		c.errorf("%v", err)
	}
	c.dashboardQueries = len(exprs)
}

type dashPanel struct {
	Title   string      `json:"title"`
	Panels  []dashPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}
