// Package envoyxds takes the configuration of Envoy's reference rate limit
// service (envoyproxy/ratelimit) from an xDS management server, as that
// service does with CONFIG_TYPE=GRPC_XDS_SOTW; Envoy Gateway's controller
// is such a server.
//
// A Subscriber opens an Aggregated Discovery Service stream (State of the
// World) to the server and asks for every resource of the type
// ratelimit.config.ratelimit.v3.RateLimitConfig (TypeURL). Each response
// holds the whole set: FromProto turns each resource into an
// envoyconf.File with the checks of a YAML file, envoyconf.Build joins
// them (one domain in two resources is an error unless Merge is set), and
// the caller's apply function receives the result. A response that
// converts, builds and applies is acknowledged (ACK) with its version;
// one that does not is rejected (NACK) with the error, naming the
// resource ("xds:" and its name) and the field, and the last applied
// configuration stays in force. A response with no resource is applied:
// it leaves no domain with limits, as in the original.
//
// When the server cannot be reached or the stream breaks, the Subscriber
// keeps the last applied configuration and reconnects after a backoff;
// it logs the outage at most once per 30 seconds above debug level (the
// other tries at debug). Its first request on a new stream carries the
// version last applied. apply runs on Run's goroutine and should return
// promptly: the stream waits for it.
//
// The settings of the original service and their Config fields:
//
//	CONFIG_GRPC_XDS_SERVER_URL                     ServerURL (localhost:18000)
//	CONFIG_GRPC_XDS_NODE_ID                        NodeID (default)
//	CONFIG_GRPC_XDS_NODE_METADATA                  NodeMetadata (string values;
//	                                                 written k1=v1,k2=v2)
//	CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS      Headers (gRPC metadata;
//	                                                 written k1:v1,k2:v2)
//	CONFIG_GRPC_XDS_SERVER_USE_TLS and the TLS     Creds (nil: plain text)
//	  files (CONFIG_GRPC_XDS_CLIENT_TLS_CERT,
//	  _KEY, CONFIG_GRPC_XDS_SERVER_TLS_CACERT,
//	  CONFIG_GRPC_XDS_SERVER_TLS_SAN)
//	CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL  RetryInterval (3s)
//	XDS_CLIENT_BACKOFF_INITIAL_INTERVAL            BackoffInitial (10s)
//	XDS_CLIENT_BACKOFF_MAX_INTERVAL                BackoffMax (60s)
//	XDS_CLIENT_BACKOFF_RANDOM_FACTOR               BackoffRandomFactor (0.5)
//	XDS_CLIENT_BACKOFF_JITTER                      Jitter (true)
//	XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES               MaxMsgSize (gRPC's 4 MiB)
//	MERGE_DOMAIN_CONFIG                            Merge (false)
//
// Two of them act differently here. The backoff doubles from
// BackoffInitial up to BackoffMax and, with Jitter, spreads each wait
// within ±BackoffRandomFactor of it; the original passes the random
// factor to its backoff as the multiplier, so that with the default of
// 0.5 it waits the initial interval every time.
// RetryInterval, which the original gives to a retry interceptor that
// does not apply to the ADS stream, paces NACKs instead: when the server
// answers a NACK by resending a configuration that is rejected again, as
// go-control-plane's snapshot cache does, each further NACK on the stream
// waits RetryInterval, so that the two do not spin.
//
// The resource carries what the original reads of it: domain, and for
// each descriptor key, value, rate_limit (unit SECOND … YEAR, WEEK;
// requests_per_unit; unlimited; name; replaces), shadow_mode,
// detailed_metric and nested descriptors. Its proto has no quota_mode,
// share_threshold or value_to_metric, so a configuration from xDS has
// none of them.
//
// Metrics: allot_envoy_xds_updates_total{result="applied"|"rejected"},
// allot_envoy_xds_connected (1 while a stream is open) and
// allot_envoy_xds_retries_total (streams that failed or ended, each retried).
package envoyxds
