package main

// rally token: sign a JWT that rally serve accepts, from the command line.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rallyws/rally/internal/cli"
	"github.com/rallyws/rally/server"
)

const tokenUsage = `Usage: rally token --subscribe PATTERNS --publish PATTERNS [flags]

Signs a token (a JWT, HS256) that rally serve --token-secret accepts on
/ws, /chat and /echo, and prints it on stdout, alone on its last line:

  export RALLY_TOKEN_SECRET=$(openssl rand -hex 32)   # the server's secret
  TOKEN=$(rally token --subscribe 'chat.*' --publish 'chat.*' --subject alice)
  rally cat "ws://127.0.0.1:8080/ws?token=$TOKEN"

The secret is read from RALLY_TOKEN_SECRET, as rally serve reads it, or
from --secret-file (never from the command line, which other users of
the machine can see). Patterns are topics in which "*" stands for any run
of characters, comma-separated; a token may grant subscribing, publishing
or both. What the token grants goes to stderr.

Flags:
`

// token runs rally token with args (after "token") and returns its exit
// status: 0 with the token printed, 1 when the secret cannot be read, 2
// for wrong usage.
func token(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rally token")
	var subscribe, publish list
	fs.Var(&subscribe, "subscribe", "topic `PATTERNS` the token may subscribe to (\"chat.*,news\")")
	fs.Var(&publish, "publish", "topic `PATTERNS` the token may publish on")
	expires := fs.Duration("expires", 24*time.Hour, "how long the token is valid (rally serve closes a connection\nwith 1008 when its token expires)")
	subject := fs.String("subject", "", "who the token is for (its \"sub\" claim; rally serve logs it)")
	secretFile := fs.String("secret-file", "", "read the secret from `FILE` instead of RALLY_TOKEN_SECRET")
	pos, err := cli.Parse(fs, args)
	switch {
	case err != nil:
	case len(pos) > 0:
		err = cli.Usagef("unexpected argument %q", pos[0])
	case len(subscribe) == 0 && len(publish) == 0:
		err = cli.Usagef("a token grants nothing without --subscribe or --publish")
	case *expires <= 0:
		err = cli.Usagef("--expires is %v; it must be more than 0 (rally serve refuses tokens without an expiry)", *expires)
	}
	help := func(w io.Writer) {
		fmt.Fprint(w, tokenUsage)
		cli.PrintFlags(w, fs, "subscribe", "publish", "expires", "subject", "secret-file")
	}
	if status := cli.Exit("rally token", err, stdout, stderr, help); status >= 0 {
		return status
	}
	secret, err := tokenSecret(*secretFile)
	if err != nil {
		fmt.Fprintf(stderr, "rally token: %v\n", err)
		var usage *cli.UsageError
		if errors.As(err, &usage) {
			return 2
		}
		return 1
	}
	exp := time.Now().Add(*expires).Truncate(time.Second)
	tok, err := server.SignToken(secret, server.Claims{
		Subscribe: subscribe,
		Publish:   publish,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   *subject,
			IssuedAt:  jwt.NewNumericDate(time.Now()),
			ExpiresAt: jwt.NewNumericDate(exp),
		},
	})
	if err != nil {
		fmt.Fprintf(stderr, "rally token: %s (see rally token --help)\n", strings.TrimPrefix(err.Error(), "server: signing a token: "))
		return 2
	}
	fmt.Fprintf(stderr, "token%s: subscribe %s; publish %s; expires %s\n", subjectNote(*subject),
		orNone(subscribe), orNone(publish), exp.UTC().Format(time.RFC3339))
	fmt.Fprintln(stdout, tok)
	return 0
}

// tokenSecret reads the secret from file, or else RALLY_TOKEN_SECRET; it
// must be one rally serve accepts (32 bytes or more). A file's final
// newline is not part of the secret.
func tokenSecret(file string) ([]byte, error) {
	var secret string
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--secret-file: %w", err)
		}
		secret = strings.TrimRight(string(b), "\r\n")
	case os.Getenv("RALLY_TOKEN_SECRET") != "":
		secret = os.Getenv("RALLY_TOKEN_SECRET")
	default:
		return nil, cli.Usagef("no secret: set RALLY_TOKEN_SECRET (as for rally serve) or give --secret-file (see rally token --help)")
	}
	if len(secret) < 32 {
		return nil, cli.Usagef("the secret is %d bytes; rally serve needs at least 32 (see rally token --help)", len(secret))
	}
	return []byte(secret), nil
}

func subjectNote(subject string) string {
	if subject == "" {
		return ""
	}
	return " for " + subject
}

func orNone(l list) string {
	if len(l) == 0 {
		return "nothing"
	}
	return l.String()
}
