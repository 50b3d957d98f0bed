package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/arbiterlab/arbiter/internal/enginehttp"
)

// slurmAPI is the slurmrestd API version arbiter speaks (Slurm 21.08 to 23.02 serve it).
const slurmAPI = "/slurm/v0.0.38"

// restReply is what every slurmrestd answer carries besides its payload.
type restReply struct {
	Errors []struct {
		Code  int    `json:"error_code"`
		Error string `json:"error"`
	} `json:"errors"`
}

func (r restReply) err() string {
	var msgs []string
	for _, e := range r.Errors {
		msgs = append(msgs, e.Error)
	}
	return strings.Join(msgs, "; ")
}

// rest sends one request to slurmrestd and decodes its JSON answer into out.
func (s Slurm) rest(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(s.REST, "/")+slurmAPI+path, rd)
	if err != nil {
		return fmt.Errorf("slurmrestd: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-SLURM-USER-NAME", s.User)
	req.Header.Set("X-SLURM-USER-TOKEN", s.Token)
	resp, err := enginehttp.Client(0).Do(req)
	if err != nil {
		return fmt.Errorf("slurmrestd %s: %w", s.REST, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("slurmrestd %s %s: %w", method, path, err)
	}
	var rr restReply
	json.Unmarshal(b, &rr)
	if resp.StatusCode != http.StatusOK || len(rr.Errors) > 0 {
		msg := rr.err()
		if msg == "" {
			msg = strings.TrimSpace(string(b))
			if len(msg) > 300 {
				msg = msg[:300]
			}
		}
		lower := strings.ToLower(msg)
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden ||
			strings.Contains(lower, "zero bytes were transmitted") || strings.Contains(lower, "auth") {
			msg += " (is the token in $SLURM_JWT current and $SLURM_USER_NAME its user?)"
		}
		return &slurmError{cmd: "slurmrestd", msg: msg, err: fmt.Errorf("%s %s: HTTP %s", method, path, resp.Status)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("slurmrestd %s %s: %w", method, path, err)
		}
	}
	return nil
}

// submitREST submits the job through slurmrestd. Its environment is the base
// environment and the secrets, as sbatch's --export would give it.
func (s Slurm) submitREST(ctx context.Context, l Launch, script string, env []string, output string) (string, error) {
	if len(s.Options) > 0 {
		return "", fmt.Errorf("slurm runtime: %w: runtime.sbatch options (%s) cannot go through slurmrestd; leave out runtime.rest to submit with sbatch",
			ErrSlurmRejected, strings.Join(s.Options, " "))
	}
	envMap := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envMap[k] = v
	}
	if len(envMap) == 0 {
		envMap["PATH"] = "/usr/local/bin:/usr/bin:/bin" // slurmrestd refuses a job with no environment
	}
	job := map[string]any{"name": slurmJobName(l), "comment": SlurmComment(l.DatabaseID, l.ExperimentID, l.RunID),
		"environment": envMap, "current_working_directory": filepath.Dir(l.LogPath), "standard_output": output,
		"requeue": false}
	for k, v := range map[string]string{"partition": s.Partition, "account": s.Account, "qos": s.QOS} {
		if v != "" {
			job[k] = v
		}
	}
	if s.TimeLimit != "" {
		m, err := SlurmMinutes(s.TimeLimit)
		if err != nil {
			return "", fmt.Errorf("slurm runtime: %w", err)
		}
		job["time_limit"] = m
	}
	if s.GPUs > 0 {
		job["gres"] = fmt.Sprintf("gpu:%d", s.GPUs)
	}
	var out struct {
		JobID int64 `json:"job_id"`
	}
	if err := s.rest(ctx, http.MethodPost, "/job/submit", map[string]any{"script": script, "job": job}, &out); err != nil {
		return "", submitError(err, s.Partition)
	}
	if out.JobID <= 0 {
		return "", fmt.Errorf("slurm runtime: slurmrestd gave no job id")
	}
	return strconv.FormatInt(out.JobID, 10), nil
}

// restJob is the part of a slurmrestd job that arbiter reads.
type restJob struct {
	JobID      int64    `json:"job_id"`
	Name       string   `json:"name"`
	Comment    string   `json:"comment"`
	State      string   `json:"job_state"`
	Reason     string   `json:"state_reason"`
	BatchHost  string   `json:"batch_host"`
	GRES       []string `json:"gres_detail"`
	ExitCode   int      `json:"exit_code"`
	SubmitTime int64    `json:"submit_time"`
	StartTime  int64    `json:"start_time"`
}

// showREST reads a job through slurmrestd, in the words of `scontrol show job -d -o`.
func (s Slurm) showREST(ctx context.Context, id string) (slurmJob, error) {
	var out struct {
		Jobs []restJob `json:"jobs"`
	}
	if err := s.rest(ctx, http.MethodGet, "/job/"+id, nil, &out); err != nil {
		return nil, err
	}
	if len(out.Jobs) == 0 {
		return nil, fmt.Errorf("slurmrestd: no job %s", id)
	}
	j := out.Jobs[0]
	sj := slurmJob{"JobId": strconv.FormatInt(j.JobID, 10), "JobState": j.State, "Reason": j.Reason,
		"BatchHost": j.BatchHost, "Comment": j.Comment}
	if len(j.GRES) > 0 {
		sj["GRES"] = j.GRES[0]
	}
	// exit_code is the wait status: a signal in the low bits, the code above them.
	if sig := j.ExitCode & 0x7f; sig != 0 {
		sj["ExitCode"] = fmt.Sprintf("0:%d", sig)
	} else {
		sj["ExitCode"] = fmt.Sprintf("%d:0", j.ExitCode>>8)
	}
	for k, t := range map[string]int64{"SubmitTime": j.SubmitTime, "StartTime": j.StartTime} {
		if t > 0 {
			sj[k] = time.Unix(t, 0).Local().Format("2006-01-02T15:04:05")
		}
	}
	return sj, nil
}

func (s Slurm) cancelREST(id string, kill bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := "/job/" + id
	if kill {
		path += "?signal=KILL"
	}
	return s.rest(ctx, http.MethodDelete, path, nil, nil)
}

func (s Slurm) nodeAddrREST(ctx context.Context, node string) (string, error) {
	var out struct {
		Nodes []struct {
			Address string `json:"address"`
		} `json:"nodes"`
	}
	if err := s.rest(ctx, http.MethodGet, "/node/"+node, nil, &out); err != nil {
		return "", err
	}
	if len(out.Nodes) == 0 {
		return "", fmt.Errorf("slurmrestd: no node %s", node)
	}
	return out.Nodes[0].Address, nil
}

// SlurmMinutes converts a Slurm time limit ("90", "1:30:00", "2-12", "UNLIMITED") to
// whole minutes, rounded up; 0 for no limit.
func SlurmMinutes(t string) (int, error) {
	if t == "UNLIMITED" || t == "INFINITE" {
		return 0, nil
	}
	bad := fmt.Errorf("time %q is not a Slurm time limit", t)
	days := 0
	rest := t
	if d, r, ok := strings.Cut(t, "-"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return 0, bad
		}
		days, rest = n, r
	}
	var parts []int
	for p := range strings.SplitSeq(rest, ":") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return 0, bad
		}
		parts = append(parts, n)
	}
	var secs int
	switch {
	case days > 0 && len(parts) == 1: // D-HH
		secs = parts[0] * 3600
	case days > 0 && len(parts) == 2: // D-HH:MM
		secs = parts[0]*3600 + parts[1]*60
	case len(parts) == 1: // MM
		secs = parts[0] * 60
	case len(parts) == 2: // MM:SS
		secs = parts[0]*60 + parts[1]
	case len(parts) == 3: // HH:MM:SS
		secs = parts[0]*3600 + parts[1]*60 + parts[2]
	default:
		return 0, bad
	}
	secs += days * 86400
	return (secs + 59) / 60, nil
}
