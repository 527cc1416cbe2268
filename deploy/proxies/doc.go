// Package proxies holds tested configurations of the proxies that put allot
// in front of an application through their auth hooks (nginx's
// auth_request, Caddy's forward_auth): nginx.conf and Caddyfile, run by
// this package's tests against real nginx and Caddy processes and a real
// regional pod. It has no Go API.
package proxies
