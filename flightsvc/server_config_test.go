package flightsvc

import (
	"strings"
	"testing"
)

// TestConfigValidate holds every refusal of Config.Validate, and the settings beside each that it
// accepts, so a check cannot be lost or loosened without a failing row.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // a substring of the refusal; empty: accepted
	}{
		{name: "defaults", cfg: Config{}},
		{name: "http on loopback", cfg: Config{HTTPListen: "127.0.0.1:0"}},
		{name: "http beyond loopback", cfg: Config{HTTPListen: "0.0.0.0:0", AuthTokens: []string{"t"}}, want: "refusing to serve the HTTP endpoints (/metrics, /status) on 0.0.0.0:0"},
		{name: "http beyond loopback allowed", cfg: Config{HTTPListen: "0.0.0.0:0", AllowUnauthenticatedRemote: true}},
		{name: "empty token", cfg: Config{AuthTokens: []string{"a", ""}}, want: "auth token 2 of 2 is empty or blank"},
		{name: "blank token", cfg: Config{AuthTokens: []string{" \t"}}, want: "auth token 1 of 1 is empty or blank"},
		{name: "blank token even when remote is allowed", cfg: Config{AuthTokens: []string{" "}, AllowUnauthenticatedRemote: true}, want: "auth token 1 of 1 is empty or blank"},
		{name: "remote without token", cfg: Config{Listen: "0.0.0.0:0"}, want: "refusing to listen on 0.0.0.0:0 without --auth-token"},
		{name: "remote with token", cfg: Config{Listen: "0.0.0.0:0", AuthTokens: []string{"t"}}},
		{name: "remote without token allowed", cfg: Config{Listen: "0.0.0.0:0", AllowUnauthenticatedRemote: true}},
		{name: "certificate without key", cfg: Config{TLSCert: "c.pem"}, want: "TLS needs both a certificate and a key"},
		{name: "key without certificate", cfg: Config{TLSKey: "k.pem"}, want: "TLS needs both a certificate and a key"},
		{name: "client CA without certificate", cfg: Config{TLSClientCA: "ca.pem"}, want: "a client CA (mTLS) needs a server certificate and key"},
		{name: "mTLS", cfg: Config{TLSCert: "c.pem", TLSKey: "k.pem", TLSClientCA: "ca.pem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.EnsureDefaults().Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted, want a refusal containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("refusal %q, want it to contain %q", err, tc.want)
			}
		})
	}
}
