package pusherwire

import (
	"encoding/json"
	"testing"
)

// The signature of Pusher's documentation example (channels, "Authenticating
// users" / private channel): socket 1234.1234, channel private-foobar, app
// secret 7ad3773142a6692b25b8.
func TestSignMatchesPushersDocumentedExample(t *testing.T) {
	got := Sign("7ad3773142a6692b25b8", "1234.1234:private-foobar")
	const want = "58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4"
	if got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestDataObjectTakesAStringOfJSONOrTheObject(t *testing.T) {
	for _, raw := range []string{`"{\"user_id\":\"u\"}"`, `{"user_id":"u"}`} {
		var v struct {
			UserID string `json:"user_id"`
		}
		if err := DataObject(json.RawMessage(raw), &v); err != nil || v.UserID != "u" {
			t.Errorf("DataObject(%s) = %+v, %v", raw, v, err)
		}
	}
	var v map[string]any
	if err := DataObject(json.RawMessage(`"not json"`), &v); err == nil {
		t.Error("DataObject of a string that is not JSON: no error")
	}
}
