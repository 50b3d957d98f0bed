package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/arbiterlab/arbiter/internal/bytesize"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/enginehttp"
)

// An arm that already runs (runtime kind external) is what its engine's
// /get_server_info says it is. That answer comes from a process arbiter did not start,
// so it is read as hostile input: bounded, and refused whole when it cannot be read,
// is over the bound or is not a JSON object. A refused answer refuses the arm; only a
// pin that a readable answer does not mention is left unverified (a caveat), as are
// the pins of presets that serve no server info.

// MaxServerInfoBytes is the most of a /get_server_info answer arbiter reads: SGLang's is
// a few KiB. An answer over it is refused, never cut to fit.
const MaxServerInfoBytes = 1 << 20

// serverInfoMeasure is how much more of an answer over MaxServerInfoBytes is read to
// say how large it is, when it does not say so itself.
const serverInfoMeasure = 8 << 20

// ErrPinsNotHeld reports an arm that already runs (external) whose engine reports
// settings other than its pins: arbiter does not judge it.
var ErrPinsNotHeld = errors.New("the engine does not run as pinned")

// ErrPinsUncheckable reports an arm that already runs (external) whose engine's server
// info cannot be read or is refused (over MaxServerInfoBytes, not a JSON object):
// arbiter does not judge an arm whose pins it cannot check.
var ErrPinsUncheckable = errors.New("the engine's pins cannot be checked")

// CheckPins reads the server info of an arm that already runs (runtime kind external)
// at its base_url and compares it with the arm's pins (attest; no log of an engine
// arbiter did not start is read). An answer that cannot be read (no answer, an HTTP
// status other than 200), is over MaxServerInfoBytes or is not a JSON object is an
// error wrapping ErrPinsUncheckable that names the URL, credentials and query left out,
// and what was wrong.
func CheckPins(ctx context.Context, spec *arms.Spec, a arms.Arm) (PinCheck, error) {
	preset := spec.Preset()
	o, err := observe(ctx, a.BaseURL, preset, "")
	if err != nil {
		return PinCheck{}, err
	}
	return newPinCheck(attest(preset, spec.Grammar(), a.Pins, arms.Pins{}, o)), nil
}

// fetchServerInfo reads the preset's server info at base, whole or not at all, from its
// fallback path when the first answers 404; u is the URL that answered (or failed).
func fetchServerInfo(ctx context.Context, base string, preset arms.Preset) (u string, info []byte, err error) {
	u = strings.TrimRight(base, "/") + preset.ServerInfoPath
	info, err = fetchServerInfoAt(ctx, u)
	if errors.Is(err, errNotFound) && preset.ServerInfoFallback != "" {
		u = strings.TrimRight(base, "/") + preset.ServerInfoFallback
		info, err = fetchServerInfoAt(ctx, u)
	}
	return u, info, err
}

// errNotFound is an answer of 404.
var errNotFound = errors.New("HTTP 404")

// fetchServerInfoAt reads the server info at u, whole or not at all.
func fetchServerInfoAt(ctx context.Context, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	resp, err := enginehttp.Client(0).Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which the caller names without its secrets
		}
		return nil, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, errNotFound
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if resp.ContentLength > MaxServerInfoBytes {
		return nil, fmt.Errorf("server info is %s, over the 1 MiB limit", bytesize.Approx(resp.ContentLength, false))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxServerInfoBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the server info: %v", err)
	}
	if len(b) > MaxServerInfoBytes {
		more, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, serverInfoMeasure))
		return nil, fmt.Errorf("server info is %s, over the 1 MiB limit", bytesize.Approx(int64(len(b))+more, more == serverInfoMeasure))
	}
	return b, nil
}

// parseServerInfo reads server info as a JSON object, numbers as written.
func parseServerInfo(info []byte) (map[string]any, error) {
	var raw json.RawMessage
	if err := json.Unmarshal(info, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("server info is not JSON at byte %d: %v", se.Offset, se)
		}
		return nil, fmt.Errorf("server info is not JSON: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("server info is not JSON: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("server info is not a JSON object but %s", arms.JSONKind(v))
	}
	return m, nil
}

// readServerInfo reads server info as a JSON object, numbers as written; env names the
// key under which the engine reports its environment, which must then be an object.
func readServerInfo(info []byte, env string) (map[string]any, error) {
	m, err := parseServerInfo(info)
	if err != nil {
		return nil, err
	}
	if v, ok := m[env]; env != "" && ok && v != nil {
		if _, isObject := v.(map[string]any); !isObject {
			return nil, fmt.Errorf("server info's %s is not an object but %s", env, arms.JSONKind(v))
		}
	}
	return m, nil
}

// reportedOn reports whether a server-info value says a boolean flag is given: true,
// the string "true" (any case) or the number 1. false, 0, null, "false", "0" and every
// other value do not.
func reportedOn(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case string:
		return strings.EqualFold(x, "true") || x == "1"
	case json.Number:
		f, err := x.Float64()
		return err == nil && f == 1
	}
	return false
}

// sameValue reports whether a server-info value is the pinned value: the same text,
// the same number (2 and 2.0), or a list of the pinned words.
func sameValue(v any, pinned string) bool {
	got := reportedText(v)
	if got == pinned {
		return true
	}
	if n, ok := v.(json.Number); ok {
		a, err1 := n.Float64()
		b, err2 := strconv.ParseFloat(pinned, 64)
		return err1 == nil && err2 == nil && a == b
	}
	if s, ok := v.(string); ok {
		a, err1 := strconv.ParseFloat(s, 64)
		b, err2 := strconv.ParseFloat(pinned, 64)
		return err1 == nil && err2 == nil && a == b
	}
	if list, ok := v.([]any); ok {
		words := strings.Fields(pinned)
		if len(words) != len(list) {
			return false
		}
		for i, item := range list {
			if _, nested := item.([]any); nested || !sameValue(item, words[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// reportedText is a server-info value as a reader would write it: strings as they
// are, numbers as written, true, false, null, and JSON for the rest.
func reportedText(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case string:
		return x
	case json.Number:
		return x.String()
	}
	b, _ := json.Marshal(v)
	return string(b)
}
