package envoycompat

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func envOf(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func TestSettingsDefaults(t *testing.T) {
	s, ign, err := FromEnv(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(ign) != 0 {
		t.Errorf("ignored = %v, want none", ign)
	}
	want := Settings{
		Host: "0.0.0.0", Port: 8080, DebugHost: "0.0.0.0", DebugPort: 6070, GRPCHost: "0.0.0.0", GRPCPort: 8081,
		GRPCMaxConnectionAge: 24 * time.Hour, GRPCMaxConnectionAgeGrace: time.Hour,
		LogLevel: "WARN", LogFormat: "text", ConfigType: "FILE",
		RuntimeRoot: "/srv/runtime_data/current", RuntimeAppDirectory: "config", RuntimeWatchRoot: true,
		PrometheusAddr: ":9090", PrometheusPath: "/metrics",
		LimitHeader: "RateLimit-Limit", RemainingHeader: "RateLimit-Remaining", ResetHeader: "RateLimit-Reset",
		BackendType: "redis", RedisSocketType: "unix", RedisType: "SINGLE", RedisURL: "/var/run/nutcracker/ratelimit.sock",
		RedisPoolSize: 10, RedisTimeout: 10 * time.Second,
		StoreTimeout: 50 * time.Millisecond, RuntimePoll: time.Second, Region: "local", Replicas: 1,
	}
	want.XDS = XDSSettings{ServerURL: "localhost:18000", NodeID: "default", RetryInterval: 3 * time.Second,
		BackoffInitial: 10 * time.Second, BackoffMax: 60 * time.Second, BackoffRandomFactor: 0.5, BackoffJitter: true}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("defaults =\n%+v\nwant\n%+v", s, want)
	}
}

// TestSettingsEnvoyGateway reads the environment Envoy Gateway gives its
// rate limit Deployment.
func TestSettingsEnvoyGateway(t *testing.T) {
	s, ign, err := FromEnv(envOf(map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.redis.svc:6379",
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "false", "CONFIG_TYPE": "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key",
		"GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/redis-certs/tls.crt", "REDIS_TLS_CLIENT_KEY": "/redis-certs/tls.key",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "STATSD_PORT": "9125",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.RedisSocketType != "tcp" || s.RedisURL != "redis.redis.svc:6379" || s.ConfigType != "GRPC_XDS_SOTW" ||
		s.XDS.ServerURL != "envoy-gateway:18001" || s.XDS.NodeID != "envoy-ratelimit" || !s.XDS.UseTLS ||
		s.GRPCClientTLSCACert != "/certs/ca.crt" || !s.ForceStart || s.RuntimeWatchRoot || !s.RuntimeIgnoreDot ||
		s.LogLevel != "INFO" || !s.UsePrometheus || s.PrometheusAddr != ":19001" || !s.RedisTLS {
		t.Errorf("settings = %+v", s)
	}
	var names []string
	for _, i := range ign {
		names = append(names, i.Name)
		if i.Why == "" {
			t.Errorf("%s ignored without a reason", i.Name)
		}
	}
	if strings.Join(names, ",") != "STATSD_PORT,USE_STATSD" {
		t.Errorf("ignored = %v, want STATSD_PORT and USE_STATSD", names)
	}
}

func TestSettingsErrors(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		name string
	}{
		{map[string]string{"PORT": "http"}, "PORT"},
		{map[string]string{"GRPC_PORT": "70000"}, "GRPC_PORT"},
		{map[string]string{"REDIS_POOL_SIZE": "0"}, "REDIS_POOL_SIZE"},
		{map[string]string{"SHADOW_MODE": "yes please"}, "SHADOW_MODE"},
		{map[string]string{"CONFIG_TYPE": "CONSUL"}, "CONFIG_TYPE"},
		{map[string]string{"REDIS_TYPE": "ring"}, "REDIS_TYPE"},
		{map[string]string{"REDIS_SOCKET_TYPE": "udp"}, "REDIS_SOCKET_TYPE"},
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{map[string]string{"REDIS_TIMEOUT": "10"}, "REDIS_TIMEOUT"},
		{map[string]string{"BACKEND_TYPE": "memcache"}, "BACKEND_TYPE"},
		{map[string]string{"REDIS_URL": " "}, "REDIS_URL"},
		{map[string]string{"REDIS_TYPE": "cluster", "REDIS_SOCKET_TYPE": "unix"}, "REDIS_SOCKET_TYPE"},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "mymaster"}, "REDIS_URL"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_USE_TLS"},
		{map[string]string{"REDIS_TLS_CLIENT_CERT": "/c"}, "REDIS_TLS_CLIENT_CERT"},
		{map[string]string{"CONFIG_GRPC_XDS_NODE_METADATA": "zone"}, "CONFIG_GRPC_XDS_NODE_METADATA"},
		{map[string]string{"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c"}, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"},
		{map[string]string{"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/k"}, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"},
		{map[string]string{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "-1"}, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR"},
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X Reset"}, "LIMIT_RESET_HEADER"},
		{map[string]string{"ALLOT_ON_FAILURE": "maybe"}, "ALLOT_ON_FAILURE"},
		{map[string]string{"ALLOT_CHARGE_OVER_LIMIT": "sometimes"}, "ALLOT_CHARGE_OVER_LIMIT"},
		{map[string]string{"ALLOT_STORE_TIMEOUT": "0s"}, "ALLOT_STORE_TIMEOUT"},
		{map[string]string{"ALLOT_GLOBAL_LIMITS": "/etc/allot/global.yaml"}, "ALLOT_GLOBAL_LIMITS"},
		{map[string]string{"ALLOT_REGION": ""}, "ALLOT_REGION"},
	} {
		_, _, err := FromEnv(envOf(c.env))
		if !errors.Is(err, ErrSetting) || !strings.Contains(err.Error(), c.name+"=") {
			t.Errorf("%v: %v, want an error naming %s", c.env, err, c.name)
		}
	}
}

func TestSettingsCaseAndPairs(t *testing.T) {
	s, _, err := FromEnv(envOf(map[string]string{
		"REDIS_TYPE": "cluster", "REDIS_SOCKET_TYPE": "TCP", "REDIS_URL": "a:1,b:2", "LOG_FORMAT": "JSON",
		"CONFIG_GRPC_XDS_NODE_METADATA": "zone=a, team=edge", "ALLOT_ON_FAILURE": "closed",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token:abc,x-env:prod", "ALLOT_CHARGE_OVER_LIMIT": "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.RedisType != "CLUSTER" || s.RedisSocketType != "tcp" || s.LogFormat != "json" || !s.FailClosed || !s.ChargeOverLimit ||
		s.XDS.NodeMetadata["zone"] != "a" || s.XDS.NodeMetadata["team"] != "edge" ||
		s.XDS.Headers["x-token"] != "abc" || s.XDS.Headers["x-env"] != "prod" {
		t.Errorf("settings = %+v", s)
	}
}
