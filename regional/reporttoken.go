package regional

import "context"

// reportToken sends the region token with every report, as gRPC metadata
// "authorization: Bearer <token>" (coordinator.ReportAuth checks it).
//
// It does not require transport security: the tests and allot dev report
// over plaintext loopback, and the admin API's bearer token follows the
// same rule. Across a network you do not trust, give the pod TLS to the
// coordinator (Config.CoordinatorCreds, --coordinator-tls-*) so that the
// token is not sent in the clear.
type reportToken string

func (t reportToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (reportToken) RequireTransportSecurity() bool { return false }
