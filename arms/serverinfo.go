package arms

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// A deployment's GET /get_server_info is the record of what it really ran with: SGLang
// returns its resolved server arguments (one key per flag of launch_server) with a few
// more keys of its own, and refserve mirrors it. Two such files, from the deployment
// that worked and the one that broke, are a bisection's good and bad configurations.
//
// The mapping, per preset:
//
//   - a key names a flag: --key with _ read as - (tp_size → --tp-size, page_size →
//     --page-size); true is the bare flag, false and null are no flag (both engines'
//     boolean flags are off unless given), a string or number is the flag's one value
//     (as written in the JSON: 0.9 stays 0.9), a list is the flag followed by its
//     items, an object the flag with the object's JSON text;
//   - keys that are not flags are left out: what the engine reports about itself or
//     its run, and what arbiter's runtime sets (the host and port of each launch);
//   - refserve reports the env pins it read under env; they become env settings. SGLang
//     reports no environment: give env pins beside server_info.
//
// vllm and custom engines serve no such endpoint arbiter knows the form of.

// serverInfoSkip are, per preset, the keys of /get_server_info that are not flags.
var serverInfoSkip = map[string][]string{
	// host and port are the launch's own; the rest are SGLang's additions to its
	// server arguments: scheduler info, per-rank state and its version.
	"sglang": {"host", "port", "version", "internal_states", "max_total_num_tokens", "max_req_input_len", "status",
		"launch_command", "kv_events"},
	// refserve adds what it reports about itself, the faults its settings arm, the
	// alias of random_seed, and the values it reads from env pins (under env).
	"refserve": {"host", "port", "version", "engine", "refserve_faults", "seed",
		"bf16_index_k", "index_k_gate", "nixl_abort_handler", "health_check_timeout"},
}

// ServerInfoSettings derives a configuration's settings from its /get_server_info JSON
// by the preset's mapping (above): env settings first, then flags, each sorted by name.
// Keys in ignore are left out as well.
func ServerInfoSettings(preset string, data []byte, ignore []string) ([]Setting, error) {
	skip, ok := serverInfoSkip[preset]
	if !ok {
		return nil, fmt.Errorf("the %s preset serves no get_server_info that arbiter can read; give the configuration as pins (env, args)", preset)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var info map[string]any
	if err := dec.Decode(&info); err != nil {
		return nil, fmt.Errorf("not a get_server_info JSON object: %v", err)
	}
	if info == nil {
		return nil, fmt.Errorf("not a get_server_info JSON object: null")
	}
	var env, flags []Setting
	for _, key := range slices.Sorted(maps.Keys(info)) {
		if slices.Contains(skip, key) || slices.Contains(ignore, key) {
			continue
		}
		v := info[key]
		if key == "env" && preset == "refserve" {
			m, ok := v.(map[string]any)
			if !ok && v != nil {
				return nil, fmt.Errorf("env: want an object of variables, not %s", JSONKind(v))
			}
			for _, name := range slices.Sorted(maps.Keys(m)) {
				s, ok := m[name].(string)
				if !ok {
					return nil, fmt.Errorf("env.%s: want a string, not %s", name, JSONKind(m[name]))
				}
				if !envNameRE.MatchString(name) {
					return nil, fmt.Errorf("env: %q is not a variable name", name)
				}
				env = append(env, Setting{Kind: SettingEnv, Name: name, Value: s})
			}
			continue
		}
		if !serverInfoKeyRE.MatchString(key) {
			return nil, fmt.Errorf("key %q cannot name a flag (list it in search.ignore to leave it out)", key)
		}
		name := "--" + strings.ReplaceAll(key, "_", "-")
		s, set, err := flagFromJSON(name, v)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", key, err)
		}
		if set {
			flags = append(flags, s)
		}
	}
	return append(env, flags...), nil
}

// flagFromJSON maps one server-info value to its flag; set is false for a flag that is
// not given (false, null, an empty list).
func flagFromJSON(name string, v any) (Setting, bool, error) {
	s := Setting{Kind: SettingFlag, Name: name}
	switch x := v.(type) {
	case nil:
		return s, false, nil
	case bool:
		if !x {
			return s, false, nil
		}
		s.Tokens = []string{name}
	case json.Number:
		s.Value, s.Tokens = x.String(), []string{name, x.String()}
	case string:
		s.Value, s.Tokens = x, []string{name, x}
		if IsFlagToken(x) {
			s.Tokens = []string{name + "=" + x} // a value that reads as a flag binds
		}
	case []any:
		if len(x) == 0 {
			return s, false, nil
		}
		s.Tokens = []string{name}
		for _, item := range x {
			switch it := item.(type) {
			case string:
				if IsFlagToken(it) {
					return s, false, fmt.Errorf("list item %q reads as a flag on a command line", it)
				}
				s.Tokens = append(s.Tokens, it)
			case json.Number:
				s.Tokens = append(s.Tokens, it.String())
			case bool:
				s.Tokens = append(s.Tokens, fmt.Sprint(it))
			default:
				return s, false, fmt.Errorf("a list of %s cannot be a flag's values", JSONKind(item))
			}
		}
		s.Value = strings.Join(s.Tokens[1:], " ")
	case map[string]any:
		b, err := json.Marshal(x)
		if err != nil {
			return s, false, err
		}
		s.Value, s.Tokens = string(b), []string{name, string(b)}
	default:
		return s, false, fmt.Errorf("%s cannot be a flag's value", JSONKind(v))
	}
	return s, true, nil
}

// JSONKind names the kind of a decoded JSON value for a message: "null", "a boolean",
// "a number", "a string", "a list" or "an object".
func JSONKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// serverInfoKeyRE is what a server-info key must look like to name a flag.
var serverInfoKeyRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
