package build

import (
	"errors"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

func asError(err error, ce **client.Error) bool { return errors.As(err, ce) }

func findingOf(err error) taxonomy.FindingID {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Finding()
	}
	return ""
}
