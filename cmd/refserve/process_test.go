package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// TestProcessOverlapDeadlock runs the fault as a user meets it: a refserve process
// launched with SGLang's flags, twenty streaming clients that hang up mid-reply. With
// the overlap scheduler and --tp 8 it wedges: /health 200, /health_generate 503, a new
// request queued for good. With --disable-overlap-schedule a new request completes.
func TestProcessOverlapDeadlock(t *testing.T) {
	for _, overlap := range []bool{true, false} {
		args := []string{"--tp", "8", "--inter-token-delay", "1ms", "--enable-metrics"}
		if !overlap {
			args = append(args, "--disable-overlap-schedule")
		}
		p := startProcess(t, []string{"SGLANG_HEALTH_CHECK_TIMEOUT=0.3"}, args...)
		for _, ls := range decoding(t, p.url, "cascade-", 20) {
			ls.cancel()
			<-ls.done
		}
		eventually(t, "20 aborts", func() bool { return metric(t, p.url, "sglang:num_aborted_requests_total") == 20 })
		if code := getStatus(t, p.url+"/health"); code != http.StatusOK {
			t.Errorf("overlap %v: /health: HTTP %d; want 200", overlap, code)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := canary(ctx, p.url)
		if !overlap {
			if err := <-done; err != nil {
				t.Errorf("--disable-overlap-schedule: canary after the cascade: %v", err)
			}
			if v := metric(t, p.url, "refserve:scheduler_wedged"); v != 0 {
				t.Errorf("--disable-overlap-schedule: scheduler_wedged = %v", v)
			}
			cancel()
			continue
		}
		if v := metric(t, p.url, "refserve:scheduler_wedged"); v != 1 {
			t.Fatalf("overlap on, --tp 8: scheduler_wedged = %v after 20 aborts; want 1", v)
		}
		eventually(t, "the canary to queue", func() bool { return metric(t, p.url, "sglang:num_queue_reqs") == 1 })
		if code := getStatus(t, p.url+"/health_generate"); code != http.StatusServiceUnavailable {
			t.Errorf("/health_generate on the wedged engine: HTTP %d; want 503", code)
		}
		select {
		case err := <-done:
			t.Errorf("the canary finished on the wedged engine: %v", err)
		default:
		}
		cancel()
	}
}

// TestProcessNixlAbortWedge: a prefill server over NIXL, eight sessions in flight with
// room for four in the running batch, all aborted. Without the handler (the clients hang
// up) the transfer loop dies and a new request waits forever while /health answers; with
// SGLANG_NIXL_ABORT_HANDLER=1 (abort_all) a canary completes right after the abort (the
// recovery time is logged).
func TestProcessNixlAbortWedge(t *testing.T) {
	for _, handler := range []bool{false, true} {
		var env []string
		if handler {
			env = append(env, "SGLANG_NIXL_ABORT_HANDLER=1")
		}
		p := startProcess(t, env, "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl",
			"--disaggregation-bootstrap-port", "9100", "--max-running-requests", "4", "--inter-token-delay", "1ms", "--enable-metrics")
		info := serverInfo(t, p.url)
		if info["disaggregation_mode"] != "prefill" || info["disaggregation_transfer_backend"] != "nixl" ||
			info["disaggregation_bootstrap_port"] != 9100.0 || info["nixl_abort_handler"] != handler {
			t.Errorf("server info: %v", info)
		}
		streams := decoding(t, p.url, "run-", 4)
		for i := range 4 {
			streams = append(streams, startStream(t, p.url, longReply("wait-"+string(rune('a'+i)))))
		}
		eventually(t, "four queued", func() bool { return metric(t, p.url, "sglang:num_queue_reqs") == 4 })
		start := time.Now()
		if handler { // SGLang style
			if code, body := postJSON(t, p.url+"/abort_request", map[string]any{"abort_all": true}); code != http.StatusOK {
				t.Fatalf("abort_all: HTTP %d %s", code, body)
			}
		} else { // vLLM style: every client hangs up
			for _, ls := range streams {
				ls.cancel()
			}
			eventually(t, "eight aborts", func() bool { return metric(t, p.url, "sglang:num_aborted_requests_total") == 8 })
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := canary(ctx, p.url)
		if handler {
			if err := <-done; err != nil {
				t.Fatalf("with the handler, canary after the abort: %v", err)
			}
			t.Logf("SGLANG_NIXL_ABORT_HANDLER=1: abort of 8 sessions (4 queued) to a completed canary in %s, over HTTP to a separate process", time.Since(start))
			cancel()
			continue
		}
		eventually(t, "the canary to queue", func() bool { return metric(t, p.url, "sglang:num_queue_reqs") == 1 })
		if v := metric(t, p.url, "refserve:kv_transfer_loop_dead"); v != 1 {
			t.Errorf("kv_transfer_loop_dead = %v; want 1", v)
		}
		if code := getStatus(t, p.url+"/health"); code != http.StatusOK {
			t.Errorf("/health: HTTP %d; want 200", code)
		}
		if faults, _ := serverInfo(t, p.url)["refserve_faults"].(map[string]any); faults["kv_transfer_loop_dead"] != true {
			t.Errorf("server info faults: %v", faults)
		}
		select {
		case err := <-done:
			t.Errorf("a new request completed after the transfer loop died: %v", err)
		default:
		}
		cancel()
	}
}

func serverInfo(t testing.TB, base string) map[string]any {
	t.Helper()
	resp, err := http.Get(base + "/get_server_info")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return info
}
