// Package testcert issues TLS certificates for rally's tests: a
// certificate authority made for one test and a server certificate it
// signed for localhost and 127.0.0.1, as values and as PEM files. It is
// for tests only.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Cert is a server certificate and the authority that signed it.
type Cert struct {
	// Pool trusts the authority, so a client checking the server with it
	// accepts the certificate.
	Pool *x509.CertPool
	// TLS is the server's certificate and key, for a tls.Config.
	TLS tls.Certificate
	// CAFile, CertFile and KeyFile are the same as PEM files (the key in
	// PKCS #8), in the test's temporary directory.
	CAFile, CertFile, KeyFile string
}

// Issue makes a new authority and a server certificate signed by it,
// valid for a day from an hour ago. It fails the test on any error.
func Issue(tb testing.TB) *Cert {
	tb.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rally test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	c := &Cert{
		Pool:     x509.NewCertPool(),
		TLS:      tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		CAFile:   filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "cert.pem"),
		KeyFile:  filepath.Join(dir, "key.pem"),
	}
	c.Pool.AddCert(ca)
	for _, f := range []struct {
		path, kind string
		der        []byte
	}{{c.CAFile, "CERTIFICATE", caDER}, {c.CertFile, "CERTIFICATE", der}, {c.KeyFile, "PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der}), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return c
}
