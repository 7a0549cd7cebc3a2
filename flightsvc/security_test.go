package flightsvc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// testCA issues certificates for the security tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns PEM cert and key for a leaf certificate.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func startSecure(t *testing.T, cfg Config) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg.Listen, cfg.Root = "127.0.0.1:0", t.TempDir()
	srv, err := NewServer(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv.Addr().String()
}

// listActions makes one authenticated-or-not call and returns its gRPC code.
func listActions(t *testing.T, addr string, creds credentials.TransportCredentials, token string) codes.Code {
	t.Helper()
	c, err := flight.NewClientWithMiddleware(addr, nil, nil, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	stream, err := c.ListActions(ctx, &flight.Empty{})
	if err == nil {
		_, err = stream.Recv()
	}
	return status.Code(err)
}

func TestBearerToken(t *testing.T) {
	addr := startSecure(t, Config{AuthTokens: []string{"alpha", "beta"}})
	plain := insecure.NewCredentials()
	for _, c := range []struct {
		token string
		want  codes.Code
	}{{"", codes.Unauthenticated}, {"wrong", codes.PermissionDenied}, {"alph", codes.PermissionDenied}, {"alpha", codes.OK}, {"beta", codes.OK}} {
		if got := listActions(t, addr, plain, c.token); got != c.want {
			t.Errorf("token %q: got %v, want %v", c.token, got, c.want)
		}
	}
}

func TestTLSAndMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "flight-sink test CA")
	rogue := newTestCA(t, "rogue CA")
	scert, skey := ca.issue(t, "server", true)
	ccert, ckey := ca.issue(t, "good client", false)
	rcert, rkey := rogue.issue(t, "bad client", false)
	addr := startSecure(t, Config{
		AuthTokens: []string{"tok"},
		TLSCert:    writeFile(t, dir, "s.crt", scert), TLSKey: writeFile(t, dir, "s.key", skey),
		TLSClientCA: writeFile(t, dir, "ca.crt", ca.pem),
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	clientCreds := func(certPEM, keyPEM []byte) credentials.TransportCredentials {
		cfg := &tls.Config{RootCAs: pool}
		if certPEM != nil {
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return credentials.NewTLS(cfg)
	}
	if got := listActions(t, addr, insecure.NewCredentials(), "tok"); got != codes.Unavailable {
		t.Errorf("plain TCP to a TLS server: got %v, want Unavailable", got)
	}
	if got := listActions(t, addr, clientCreds(nil, nil), "tok"); got != codes.Unavailable {
		t.Errorf("no client certificate: got %v, want Unavailable", got)
	}
	if got := listActions(t, addr, clientCreds(rcert, rkey), "tok"); got != codes.Unavailable {
		t.Errorf("client certificate from another CA: got %v, want Unavailable", got)
	}
	if got := listActions(t, addr, clientCreds(ccert, ckey), ""); got != codes.Unauthenticated {
		t.Errorf("good certificate, no token: got %v, want Unauthenticated", got)
	}
	if got := listActions(t, addr, clientCreds(ccert, ckey), "tok"); got != codes.OK {
		t.Errorf("good certificate and token: got %v, want OK", got)
	}
}

func TestRemoteListenWithoutTokenIsRefused(t *testing.T) {
	_, err := NewServer(context.Background(), Config{Listen: "0.0.0.0:0", Root: t.TempDir()})
	if err == nil {
		t.Fatal("a non-loopback listen without a token must be refused")
	}
}

// A blank token must not count as "a token is configured": it would pass the remote-listen check
// above and then be dropped, serving anonymous writes on the network.
func TestBlankAuthTokenIsRefused(t *testing.T) {
	for _, tokens := range [][]string{{" "}, {"", ""}, {"good", "  "}, {"\t"}} {
		for _, listen := range []string{"0.0.0.0:0", "127.0.0.1:0"} {
			srv, err := NewServer(context.Background(), Config{Listen: listen, Root: t.TempDir(), AuthTokens: tokens})
			if err == nil {
				srv.lis.Close()
				t.Fatalf("tokens %q on %s: server started; a blank token must be refused at start-up", tokens, listen)
			}
			if !strings.Contains(err.Error(), "blank") {
				t.Errorf("tokens %q: error %q does not say the token is blank", tokens, err)
			}
		}
	}
}

// TestBearerSchemeOnEveryPort: the Flight port and the Iceberg REST catalog on the HTTP listener
// read an Authorization header by one rule: the scheme "Bearer" in any case (RFC 7235), then a
// configured token. The same header gets the same verdict on both.
func TestBearerSchemeOnEveryPort(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := NewServer(ctx, Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Root: t.TempDir(), AuthTokens: []string{"alpha"}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	c, err := flight.NewClientWithMiddleware(srv.Addr().String(), nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		header string
		want   codes.Code
	}{
		{"Bearer alpha", codes.OK},
		{"bearer alpha", codes.OK},
		{"BEARER alpha", codes.OK},
		{"bEaReR  alpha ", codes.OK},
		{"Bearer beta", codes.PermissionDenied},
		{"Bearer ", codes.PermissionDenied},
		{"Bearer", codes.Unauthenticated},
		{"Bearealpha", codes.Unauthenticated},
		{"Basic alpha", codes.Unauthenticated},
		{"alpha", codes.Unauthenticated},
		{"", codes.Unauthenticated},
	} {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		if tc.header != "" {
			cctx = metadata.AppendToOutgoingContext(cctx, "authorization", tc.header)
		}
		stream, err := c.ListActions(cctx, &flight.Empty{})
		if err == nil {
			_, err = stream.Recv()
		}
		ccancel()
		if got := status.Code(err); got != tc.want {
			t.Errorf("Flight with %q: %v, want %v", tc.header, got, tc.want)
		}

		req, err := http.NewRequest(http.MethodGet, "http://"+srv.HTTPAddr().String()+"/iceberg/v1/config", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if wantHTTP := map[bool]int{true: http.StatusOK, false: http.StatusUnauthorized}[tc.want == codes.OK]; resp.StatusCode != wantHTTP {
			t.Errorf("Iceberg REST catalog with %q: %s, want %d", tc.header, resp.Status, wantHTTP)
		}
	}
}
