// Package conform is a conformance suite for WebSocket servers and clients
// (RFC 6455, and RFC 7692 for permessage-deflate): the ground of the
// classic Autobahn testsuite, numbered the same way wherever a case means
// the same thing, run from Go with no Python and no Docker. Its own cases,
// beyond the classic suite, are numbered from 100 up (106: UTF-8 of
// compressed text, which must fail at its first bad byte).
//
// RunServer tests a server: it connects to an echo endpoint once per case,
// sends exact bytes and judges what comes back. ServeClients tests a client:
// it serves the cases on the fuzzing-server paths of the classic suite
// (/getCaseCount, /runCase?case=N&agent=NAME, /updateReports?agent=NAME), so
// an existing client driver that echoes every message works unchanged.
// Every case gets a verdict (OK, NON-STRICT, INFORMATIONAL, UNIMPLEMENTED,
// FAILED) for its behaviour and for its close behaviour, with what was sent
// and what was observed; Report.Write writes index.json, one JSON per case
// and an HTML page.
//
// The suite is an independent oracle: it builds its expectations from the
// RFCs through internal/rawpeer and never imports rally's frame/ package or
// the root package, so it cannot share their bugs. It is not a load tester
// (section 9 times large messages, but only as information) and not a
// fuzzer of random bytes.
package conform
