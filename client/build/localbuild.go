package build

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// maxLocalBuildBytes bounds the emulator's localBuild answer: a few lines
// of a Dockerfile, never more than its artifact's Dockerfile.
const maxLocalBuildBytes = 1 << 20

// LocalBuild asks an emulator (c's endpoint on loopback) what it made of
// version of image name: on a root its build made, or on the host's system
// directories with the Dockerfile lines it did not perform. ok is false,
// with no call made, when c's endpoint is not on loopback (AWS performs
// every step or fails the build), and when the emulator is older than the
// route.
func LocalBuild(ctx context.Context, c *lambdamicrovms.Client, name, version string) (lb cliapi.LocalBuild, ok bool, err error) {
	base := ""
	if c != nil {
		base = aws.ToString(c.Options().BaseEndpoint)
	}
	if base == "" || !cplane.IsLoopbackURL(base) {
		return lb, false, nil
	}
	path := strings.NewReplacer("{imageName}", url.PathEscape(name), "{imageVersion}", url.PathEscape(version)).Replace(taxonomy.EmulatorImageBuildPath)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
	if err != nil {
		return lb, true, client.Errorf(taxonomy.KindUnexpected, "", "asking the emulator about image %s version %s: %w", name, version, err)
	}
	var hc interface {
		Do(*http.Request) (*http.Response, error)
	} = http.DefaultClient
	if h := c.Options().HTTPClient; h != nil {
		hc = h
	}
	resp, err := hc.Do(req)
	if err != nil {
		return lb, true, client.Errorf(taxonomy.KindPlatform, "", "asking the emulator about image %s version %s: %w", name, version, err).WithCause(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && resp.Header.Get("X-Amzn-ErrorType") == "UnknownOperationException" {
		// An emulator older than the route: it cannot say, so nothing is
		// refused on its account.
		return lb, false, nil
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxLocalBuildBytes+1))
	if err == nil && len(raw) > maxLocalBuildBytes {
		err = fmt.Errorf("the answer is over %d bytes", maxLocalBuildBytes)
	}
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	if err == nil {
		err = json.Unmarshal(raw, &lb)
	}
	if err != nil {
		return cliapi.LocalBuild{}, true, client.Errorf(taxonomy.KindUnexpected, "", "the emulator's answer about image %s version %s: %v", name, version, err)
	}
	return lb, true, nil
}
