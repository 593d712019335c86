// Package interop tests rally against the WebSocket peers its users run:
// npm ws (the reference where the RFCs leave a choice), undici's WebSocket
// client, Python's websockets and headless Chromium.
//
// It has no API: everything lives in its tests, which start the real peers
// as child processes and talk to them over loopback. The peers are
// installed by interop/setup.sh; a missing peer fails the tests with a
// message that says what to install. It is not a conformance suite (see
// conform/) and not a benchmark (see bench/).
package interop
