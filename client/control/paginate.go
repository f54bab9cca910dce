package control

import (
	"context"
	"strings"

	"github.com/microvms/microvms/client"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// maxPages bounds any one walk; a listing longer than this is a loop.
const maxPages = 10000

// Paginator walks one List operation page by page. Only an absent nextToken
// ends it: the service applies maxResults before nameFilter, so an empty
// page is routinely followed by pages that match. Cursors are sent through
// the generated client's query encoding, which percent-encodes their '='
// padding; a bare '=' draws a message-less 400.
type Paginator[T any] struct {
	fetch func(ctx context.Context, token *string) ([]T, *string, error)
	token *string
	seen  map[string]bool
	pages int
	done  bool
}

func newPaginator[T any](fetch func(context.Context, *string) ([]T, *string, error)) *Paginator[T] {
	return &Paginator[T]{fetch: fetch, seen: map[string]bool{}}
}

// HasMorePages reports whether NextPage has anything left to fetch.
func (p *Paginator[T]) HasMorePages() bool { return !p.done }

// NextPage fetches the next page, which may be empty.
func (p *Paginator[T]) NextPage(ctx context.Context) ([]T, error) {
	if p.done {
		return nil, client.Errorf(taxonomy.KindUnexpected, "", "NextPage called after the last page")
	}
	if p.pages >= maxPages {
		p.done = true
		return nil, client.Errorf(taxonomy.KindPlatform, taxonomy.FindingMaxResultsBeforeNameFilter, "listing did not end within %d pages", maxPages)
	}
	items, next, err := p.fetch(ctx, p.token)
	if err != nil {
		return nil, err
	}
	p.pages++
	switch {
	case next == nil || *next == "":
		p.done = true
	case p.seen[*next]:
		// A cursor handed out twice would loop forever.
		p.done = true
		return items, client.Errorf(taxonomy.KindPlatform, taxonomy.FindingPaginationCursorEncoding, "the service returned a cursor it had already returned, after %d pages", p.pages)
	default:
		p.seen[*next] = true
		p.token = next
	}
	return items, nil
}

// Pages is how many pages have been fetched.
func (p *Paginator[T]) Pages() int { return p.pages }

// All reads every remaining page.
func (p *Paginator[T]) All(ctx context.Context) ([]T, error) {
	var out []T
	for p.HasMorePages() {
		items, err := p.NextPage(ctx)
		out = append(out, items...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func pageSize(n int) (*int, error) {
	if n == 0 {
		return nil, nil
	}
	if n < 1 || n > 50 {
		return nil, refuse("", "page size %d is outside 1..50", n)
	}
	return &n, nil
}

// ListImages pages through the account's images. nameFilter is the
// service's substring filter, applied to each page after paging; pageSize 0
// takes the service's default.
func (c *Client) ListImages(nameFilter string, size int) (*Paginator[cp.MicrovmImageSummary], error) {
	ps, err := pageSize(size)
	if err != nil {
		return nil, err
	}
	var filter *string
	if nameFilter != "" {
		if strings.ContainsFunc(nameFilter, isSpace) {
			return nil, refuse("", "name filter %q contains whitespace", nameFilter)
		}
		filter = &nameFilter
	}
	return newPaginator(func(ctx context.Context, tok *string) ([]cp.MicrovmImageSummary, *string, error) {
		const op = "ListMicrovmImages"
		r, err := c.api.ListMicrovmImagesWithResponse(withOperation(ctx, op), &cp.ListMicrovmImagesParams{MaxResults: ps, NextToken: tok, NameFilter: filter})
		if err != nil {
			return nil, nil, err
		}
		out, err := reply(op, r.JSON200, r.Body, nil)
		if err != nil {
			return nil, nil, err
		}
		return out.Items, out.NextToken, nil
	}), nil
}

// FindImage returns the image named exactly name, or nil. nameFilter is a
// substring match applied after paging, so this reads every page and
// compares names itself.
func (c *Client) FindImage(ctx context.Context, name string) (*cp.MicrovmImageSummary, error) {
	if name == "" || !imageNameRE.MatchString(name) {
		return nil, refuse("", "image name %q must be 1..%d of [a-zA-Z0-9-_]", name, taxonomy.MaxImageNameLen)
	}
	p, err := c.ListImages(name, 0)
	if err != nil {
		return nil, err
	}
	var found *cp.MicrovmImageSummary
	for p.HasMorePages() {
		items, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for i := range items {
			if items[i].Name == name {
				found = &items[i]
			}
		}
	}
	return found, nil
}

// ListImageVersions pages through an image's versions.
func (c *Client) ListImageVersions(ref ImageRef, size int) (*Paginator[cp.MicrovmImageVersionSummary], error) {
	ps, err := pageSize(size)
	if err = firstErr(err, ref.check()); err != nil {
		return nil, err
	}
	return newPaginator(func(ctx context.Context, tok *string) ([]cp.MicrovmImageVersionSummary, *string, error) {
		const op = "ListMicrovmImageVersions"
		r, err := c.api.ListMicrovmImageVersionsWithResponse(withOperation(ctx, op), ref.id, &cp.ListMicrovmImageVersionsParams{MaxResults: ps, NextToken: tok})
		if err != nil {
			return nil, nil, err
		}
		out, err := reply(op, r.JSON200, r.Body, nil)
		if err != nil {
			return nil, nil, err
		}
		return out.Items, out.NextToken, nil
	}), nil
}

// ListImageBuilds pages through one version's builds. Expect several: a
// version fans out into one build per chipset generation.
func (c *Client) ListImageBuilds(ref ImageRef, version string, size int) (*Paginator[cp.MicrovmImageBuildSummary], error) {
	ps, err := pageSize(size)
	if err = firstErr(err, ref.check(), CheckImageVersion(version)); err != nil {
		return nil, err
	}
	return newPaginator(func(ctx context.Context, tok *string) ([]cp.MicrovmImageBuildSummary, *string, error) {
		const op = "ListMicrovmImageBuilds"
		r, err := c.api.ListMicrovmImageBuildsWithResponse(withOperation(ctx, op), ref.id, version, &cp.ListMicrovmImageBuildsParams{MaxResults: ps, NextToken: tok})
		if err != nil {
			return nil, nil, err
		}
		out, err := reply(op, r.JSON200, r.Body, nil)
		if err != nil {
			return nil, nil, err
		}
		return out.Items, out.NextToken, nil
	}), nil
}

// ListMicrovms pages through MicroVMs, optionally of one image (and version).
func (c *Client) ListMicrovms(image *ImageRef, version string, size int) (*Paginator[cp.MicrovmItem], error) {
	ps, err := pageSize(size)
	if err != nil {
		return nil, err
	}
	params := cp.ListMicrovmsParams{MaxResults: ps}
	if image != nil {
		if err := image.check(); err != nil {
			return nil, err
		}
		params.ImageIdentifier = ptr(image.id)
	}
	if version != "" {
		if err := CheckImageVersion(version); err != nil {
			return nil, err
		}
		params.ImageVersion = &version
	}
	return newPaginator(func(ctx context.Context, tok *string) ([]cp.MicrovmItem, *string, error) {
		const op = "ListMicrovms"
		p := params
		p.NextToken = tok
		r, err := c.api.ListMicrovmsWithResponse(withOperation(ctx, op), &p)
		if err != nil {
			return nil, nil, err
		}
		out, err := reply(op, r.JSON200, r.Body, nil)
		if err != nil {
			return nil, nil, err
		}
		return out.Items, out.NextToken, nil
	}), nil
}

// ListManagedImages pages through the managed base images.
func (c *Client) ListManagedImages(size int) (*Paginator[cp.ManagedMicrovmImageSummary], error) {
	ps, err := pageSize(size)
	if err != nil {
		return nil, err
	}
	return newPaginator(func(ctx context.Context, tok *string) ([]cp.ManagedMicrovmImageSummary, *string, error) {
		const op = "ListManagedMicrovmImages"
		r, err := c.api.ListManagedMicrovmImagesWithResponse(withOperation(ctx, op), &cp.ListManagedMicrovmImagesParams{MaxResults: ps, NextToken: tok})
		if err != nil {
			return nil, nil, err
		}
		out, err := reply(op, r.JSON200, r.Body, nil)
		if err != nil {
			return nil, nil, err
		}
		return out.Items, out.NextToken, nil
	}), nil
}

// ListManagedImageVersions pages through a managed base's versions, which
// are spelled as bare integers ("1"), unlike a custom image's ("1.0").
func (c *Client) ListManagedImageVersions(baseARN string, size int) (*Paginator[cp.ManagedMicrovmImageVersion], error) {
	ps, err := pageSize(size)
	if err != nil {
		return nil, err
	}
	ref, err := ParseImageRef(baseARN)
	if err != nil {
		return nil, err
	}
	if !ref.IsARN() {
		return nil, refuse(taxonomy.FindingImageARNColon, "ListManagedMicrovmImageVersions takes the managed image's ARN, not %q", baseARN)
	}
	return newPaginator(func(ctx context.Context, tok *string) ([]cp.ManagedMicrovmImageVersion, *string, error) {
		const op = "ListManagedMicrovmImageVersions"
		r, err := c.api.ListManagedMicrovmImageVersionsWithResponse(withOperation(ctx, op), ref.id, &cp.ListManagedMicrovmImageVersionsParams{MaxResults: ps, NextToken: tok})
		if err != nil {
			return nil, nil, err
		}
		out, err := reply(op, r.JSON200, r.Body, nil)
		if err != nil {
			return nil, nil, err
		}
		return out.Items, out.NextToken, nil
	}), nil
}
