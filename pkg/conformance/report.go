package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints the report for a terminal: one aligned row per case
// with a verdict per column, then the reason of every failure, then a
// verdict line.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tROUTING\tFALLBACK\tBILLING\tCLIENT")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", res.Case, res.Routing.Verdict, res.Fallback.Verdict, res.Billing.Verdict, res.Client.Verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	failed := 0
	for _, res := range r.Results {
		if res.OK() {
			continue
		}
		if failed == 0 {
			fmt.Fprintln(w, "\nFailures:")
		}
		failed++
		fmt.Fprintf(w, "  %s (request %s): %s\n", res.Case, res.RequestID, res.Summary)
		for i, name := range []string{"routing", "fallback", "billing", "client"} {
			if c := res.Checks()[i]; c.Verdict == Fail {
				fmt.Fprintf(w, "    %s: %s\n", name, c.Detail)
			}
		}
	}
	note := ""
	if !r.BillingChecked {
		note = " (billing not checked: give the gateway's NATS URL)"
	}
	var err error
	if failed == 0 {
		_, err = fmt.Fprintf(w, "\nall %d cases pass against %s%s\n", len(r.Results), r.Gateway, note)
	} else {
		_, err = fmt.Fprintf(w, "\n%d of %d cases fail against %s%s\n", failed, len(r.Results), r.Gateway, note)
	}
	return err
}

// WriteJSON prints the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteCases lists the matrix of routes: each case and what it expects.
func WriteCases(w io.Writer, routes Routes) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tEXPECTATION")
	for _, c := range Cases(routes) {
		fmt.Fprintf(tw, "%s\t%s\n", c.Name, c.Summary)
	}
	return tw.Flush()
}
