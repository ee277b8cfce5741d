package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/daemon"
	"github.com/bpfbench/bpfbench/incident"
)

func init() {
	register(newIncidentsCmd)
	register(newCaptureCmd)
}

func newIncidentsCmd() *cobra.Command {
	var dir, output string
	cmd := &cobra.Command{
		Use:   "incidents [--dir DIR]",
		Short: "List the incident bundles the daemon's flight recorder wrote",
		Long: `Lists the incident bundles in the daemon's spool, oldest first: when, the
target, what triggered it (its rule, bpfbench capture, SIGUSR1), the bundle's
directory and its verdict. Each bundle is a run directory: bpfbench report
DIR prints it, report.html shows it, trace.json opens in Perfetto, and
bpfbench diff compares it with a run or another incident.`,
		Example: `  bpfbench incidents
  bpfbench report /var/lib/bpfbench/incidents/20261205T031200.000Z-llama`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			list, err := incident.List(dir)
			if err != nil {
				return fmt.Errorf("reading the spool %s: %w", dir, err)
			}
			w := cmd.OutOrStdout()
			if output == "json" {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			if len(list) == 0 {
				_, err := fmt.Fprintf(w, "no incident in %s\n", dir)
				return err
			}
			for _, sm := range list {
				fmt.Fprintln(w, sm.Line())
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", incident.DefaultDir, "the daemon's spool `DIR` (incidents.dir)")
	outputFlag(cmd, &output)
	return cmd
}

func newCaptureCmd() *cobra.Command {
	var (
		target, addr string
		agents       agentFlags
	)
	cmd := &cobra.Command{
		Use:   "capture --target NAME [--daemon HOST:PORT]",
		Short: "Ask the daemon for an incident bundle of a live target now",
		Long: `Asks the bpfbench daemon for an incident of a live target now, as its rule
would: the target's flight recorder keeps its window going for
incidents.after (30 s), then writes the bundle into the spool (bpfbench
incidents lists it). The request goes through the daemon's session API
(agent.enabled), with its TLS and basic auth, for a target its allow-list
names (agent.allow.targets). SIGUSR1 to the daemon asks the same of every
live target.`,
		Example: `  bpfbench capture --target llama
  bpfbench capture --target llama --daemon https://node7:9464 --agent.user ops --agent.password-file pw --agent.ca-file ca.pem`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if target == "" {
				return usageError{"--target NAME is required: the daemon's target to capture"}
			}
			httpc, pass, err := agents.http()
			if err != nil {
				return err
			}
			httpc.Timeout = 30 * time.Second
			return capture(cmd.OutOrStdout(), httpc, addr, agents.user, pass, target)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&target, "target", "", "the daemon's target `NAME`")
	fs.StringVar(&addr, "daemon", "127.0.0.1:9464", "the daemon: `HOST:PORT` or https://HOST:PORT")
	fs.StringVar(&agents.user, "agent.user", "", "basic auth user of the daemon's web configuration")
	fs.StringVar(&agents.passwordFile, "agent.password-file", "", "`FILE` holding the daemon's basic auth password")
	fs.StringVar(&agents.caFile, "agent.ca-file", "", "`FILE` of the CA that signed the daemon's TLS certificate")
	return cmd
}

func capture(w io.Writer, httpc *http.Client, addr, user, pass, target string) error {
	base := strings.TrimSuffix(addr, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		base = "http://" + base
	}
	body, _ := json.Marshal(daemon.CaptureRequest{Target: target})
	req, err := http.NewRequest(http.MethodPost, base+daemon.PathCapture, bytes.NewReader(body))
	if err != nil {
		return usageError{"--daemon: " + err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return fmt.Errorf("asking the daemon at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	switch resp.StatusCode {
	case http.StatusAccepted:
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return fmt.Errorf("the daemon at %s serves no incident API (%s): agent.enabled in its configuration", addr, resp.Status)
	default:
		return fmt.Errorf("the daemon at %s refused: %s: %s", addr, resp.Status, strings.TrimSpace(string(b)))
	}
	var cr daemon.CaptureResponse
	if err := json.Unmarshal(b, &cr); err != nil {
		return fmt.Errorf("the daemon's answer: %w", err)
	}
	_, err = fmt.Fprintf(w, "capturing %s: the bundle is written in %.0f s into %s (bpfbench incidents lists it)\n",
		strings.Join(cr.Targets, ", "), cr.AfterSeconds, cr.Dir)
	return err
}
