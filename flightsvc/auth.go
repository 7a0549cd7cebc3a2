package flightsvc

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// healthPrefix is left open without a token so load balancers and orchestrators can probe.
const healthPrefix = "/grpc.health.v1.Health/"

// tokenAuth checks the bearer token of every call against the configured tokens.
type tokenAuth struct {
	tokens [][]byte
}

// check returns nil when ctx carries "authorization: Bearer <token>" with a configured token
// (verify), or when no token is configured or method is a health check.
func (a *tokenAuth) check(ctx context.Context, method string) error {
	if len(a.tokens) == 0 || strings.HasPrefix(method, healthPrefix) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var header string
	if vals := md.Get("authorization"); len(vals) > 0 {
		header = vals[0]
	}
	if err := a.verify(header); err != nil {
		return toStatus(err)
	}
	return nil
}

// verify checks one Authorization header value, the one rule of the Flight port and the HTTP
// listener (the Iceberg REST catalog): the scheme "Bearer" in any case (RFC 7235: schemes are
// case-insensitive), one or more spaces, then a configured token. Every configured token is
// compared in constant time, so timing reveals neither which token nor how much of one
// matched. The error wraps errUnauthenticated when the header is missing or is not a bearer
// credential, errPermissionDenied when the token is not one of them; nil when no token is
// configured.
func (a *tokenAuth) verify(header string) error {
	if len(a.tokens) == 0 {
		return nil
	}
	if header == "" {
		return fmt.Errorf("%w: missing bearer token: send the header \"authorization: Bearer <token>\"", errUnauthenticated)
	}
	scheme, cred, spaced := strings.Cut(header, " ")
	if !spaced || !strings.EqualFold(scheme, "bearer") {
		return fmt.Errorf("%w: authorization header must be \"Bearer <token>\"", errUnauthenticated)
	}
	got := []byte(strings.TrimSpace(cred))
	ok := 0
	for _, t := range a.tokens {
		ok |= subtle.ConstantTimeCompare(got, t)
	}
	if ok != 1 {
		return fmt.Errorf("%w: bearer token not accepted", errPermissionDenied)
	}
	return nil
}

func (a *tokenAuth) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := a.check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

func (a *tokenAuth) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := a.check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
}

// serverTLS builds the server's TLS credentials from cert files; clientCA enables mTLS.
func serverTLS(certFile, keyFile, clientCAFile string) (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s / key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("read client CA %s: %w", clientCAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s holds no PEM certificate", clientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}

// isLoopback reports whether a listen address only accepts local connections.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
