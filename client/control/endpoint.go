package control

import (
	"os"
	"regexp"
	"strings"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// partition is the slice of the AWS partition table the model's endpoint
// rules read: DNS suffixes and whether FIPS and dual-stack exist.
type partition struct {
	name         string
	match        *regexp.Regexp
	dnsSuffix    string
	dualStackDNS string
	supportsFIPS bool
	supportsDual bool
}

var partitions = []partition{
	{name: "aws-cn", match: regexp.MustCompile(`^cn-\w+-\d+$`), dnsSuffix: "amazonaws.com.cn", dualStackDNS: "api.amazonwebservices.com.cn", supportsFIPS: true, supportsDual: true},
	{name: "aws-us-gov", match: regexp.MustCompile(`^us-gov-\w+-\d+$`), dnsSuffix: "amazonaws.com", dualStackDNS: "api.aws", supportsFIPS: true, supportsDual: true},
	{name: "aws-iso", match: regexp.MustCompile(`^us-iso-\w+-\d+$`), dnsSuffix: "c2s.ic.gov", dualStackDNS: "c2s.ic.gov", supportsFIPS: true, supportsDual: false},
	{name: "aws-iso-b", match: regexp.MustCompile(`^us-isob-\w+-\d+$`), dnsSuffix: "sc2s.sgov.gov", dualStackDNS: "sc2s.sgov.gov", supportsFIPS: true, supportsDual: false},
	{name: "aws", match: regexp.MustCompile(`.*`), dnsSuffix: "amazonaws.com", dualStackDNS: "api.aws", supportsFIPS: true, supportsDual: true},
}

func partitionOf(region string) partition {
	for _, p := range partitions {
		if p.match.MatchString(region) {
			return p
		}
	}
	return partitions[len(partitions)-1]
}

// endpointError is an error of the model's endpoint rules, worded exactly as
// the rule set words it so its test cases compare verbatim.
type endpointError string

func (e endpointError) Error() string { return string(e) }

// ResolveEndpoint applies the model's endpoint rule set: a custom endpoint
// wins (and refuses FIPS or dual-stack beside it); otherwise
// https://lambda[-fips].{region}.{suffix}, the suffix from the region's
// partition. The model's own test cases replay against it.
func ResolveEndpoint(region string, useFIPS, useDualStack bool, custom string) (string, error) {
	if custom != "" {
		if useFIPS {
			return "", endpointError("Invalid Configuration: FIPS and custom endpoint are not supported")
		}
		if useDualStack {
			return "", endpointError("Invalid Configuration: Dualstack and custom endpoint are not supported")
		}
		return custom, nil
	}
	if region == "" {
		return "", endpointError("Invalid Configuration: Missing Region")
	}
	p := partitionOf(region)
	host, suffix := SigningName, p.dnsSuffix
	if useFIPS {
		if !p.supportsFIPS {
			return "", endpointError("FIPS is enabled but this partition does not support FIPS")
		}
		host += "-fips"
	}
	if useDualStack {
		if !p.supportsDual {
			if useFIPS {
				return "", endpointError("FIPS and DualStack are enabled, but this partition does not support one or both")
			}
			return "", endpointError("DualStack is enabled but this partition does not support DualStack")
		}
		suffix = p.dualStackDNS
	}
	return "https://" + host + "." + region + "." + suffix, nil
}

// ConfiguredEndpoint is the control-plane endpoint a caller configured, ""
// when none: the option first, then AWS_ENDPOINT_URL_LAMBDA_MICROVMS (the
// service-specific variable aws-sdk-go-v2 derives from the model's sdkId
// "Lambda Microvms"), AWS_ENDPOINT_URL_LAMBDA, then AWS_ENDPOINT_URL, unless
// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is true. getenv nil reads the process
// environment.
func ConfiguredEndpoint(option string, getenv func(string) string) string {
	return endpointOverride(option, getenv)
}

// endpointOverride is ConfiguredEndpoint.
func endpointOverride(option string, getenv func(string) string) string {
	if option != "" {
		return option
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	if strings.EqualFold(getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"), "true") {
		return ""
	}
	for _, k := range []string{"AWS_ENDPOINT_URL_LAMBDA_MICROVMS", "AWS_ENDPOINT_URL_LAMBDA", "AWS_ENDPOINT_URL"} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
	}
	return ""
}

// resolveFor is ResolveEndpoint for a client.Region, with its failure in the
// taxonomy.
func resolveFor(o *Options) (string, error) {
	ep, err := ResolveEndpoint(o.Region.String(), o.UseFIPS, o.UseDualStack, endpointOverride(o.Endpoint, o.Getenv))
	if err != nil {
		return "", client.Errorf(taxonomy.KindInvalidArg, "", "control-plane endpoint: %v", err)
	}
	return strings.TrimRight(ep, "/"), nil
}
