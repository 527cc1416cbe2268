// Package envoycompat lets allot run where envoyproxy/ratelimit runs: the
// same environment settings (FromEnv), the same configuration directory
// layout, reloaded on change (Runtime), and the same HTTP endpoints
// (/healthcheck, /json, and /rlconfig on the debug listener). The
// `allot envoy-ratelimit` command (the image's /bin/ratelimit) wires them
// to a standalone regional pod that answers RLS from the configuration.
//
// Settings that have no meaning here are accepted and returned by FromEnv
// as Ignored, with why, for the command to log once each; a setting whose
// value cannot work is an error naming it.
package envoycompat
