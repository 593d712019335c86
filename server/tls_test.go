package server

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/testcert"
)

func TestTLSServesWSSAndHTTPS(t *testing.T) {
	cert, key, pool := selfSigned(t)
	ts := serve(t, Config{TLSCert: cert, TLSKey: key})
	wss := strings.Replace(ts.ws, "ws://", "wss://", 1)
	a := dial(t, wss+"/ws", &rally.DialOptions{TLSConfig: &tls.Config{RootCAs: pool}})
	a.send(`{"type":"subscribe","topic":"t","id":1}`)
	a.expect(`{"type":"ack","id":1}`)

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get(strings.Replace(ts.http, "http://", "https://", 1) + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("https /healthz: %d", resp.StatusCode)
	}
}

func TestTLSNeedsBothCertificateAndKey(t *testing.T) {
	if _, err := New(Config{TLSCert: "cert.pem"}); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key to files and
// returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	c := testcert.Issue(t)
	return c.CertFile, c.KeyFile, c.Pool
}
