package routing

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/targets"
)

// Shaped is what a delivery's attempts send as its target's transform
// made it: the shape the journal records, and the payload when it is not
// the message's.
type Shaped struct {
	journal.Shape
	Body []byte
}

// transformKeys are the keys a transform's map may have.
var transformKeys = []string{"payload", "content_type", "headers", "path", "method", "cancel"}

// Methods are the methods a transform may send with.
var Methods = []string{http.MethodPost, http.MethodPut, http.MethodPatch}

// maxPath bounds a transform's path.
const maxPath = 1024

// CompileTransform compiles a target's transform, which must yield a map
// (transformKeys).
func CompileTransform(src string) (*Program, error) {
	return compile("transform", src, cel.MapType(cel.StringType, cel.DynType))
}

// Transforms are the targets' transforms compiled, by target name.
type Transforms map[string]*Program

// NewTransforms compiles the transforms of ts, reusing the programs of
// prev (which may be nil) for the transforms it has. A transform that
// does not compile is an error naming its target: a target is checked
// when saved, so it means a target saved by a build that allowed more.
func NewTransforms(ts map[string]lifecycle.Target, prev Transforms) (Transforms, error) {
	compiled := map[string]*Program{}
	for _, p := range prev {
		compiled[p.src] = p
	}
	out := Transforms{}
	for name, t := range ts {
		if t.Transform == "" {
			continue
		}
		p := compiled[t.Transform]
		if p == nil {
			var err error
			if p, err = CompileTransform(t.Transform); err != nil {
				return nil, fmt.Errorf("target %s: %w", name, err)
			}
			compiled[t.Transform] = p
		}
		out[name] = p
	}
	return out, nil
}

// ReadsPayload reports whether a transform may read the payload, which then
// must be at hand for Shape.
func (t Transforms) ReadsPayload() bool {
	for _, p := range t {
		if p.payload {
			return true
		}
	}
	return false
}

// Shape runs the transform of target, if it has one, on in, the message
// m's input: what the delivery sends where it differs from m, nil when
// the target has no transform or it changed nothing. A transform that
// fails, or yields what cannot be sent (a payload over maxPayload bytes
// among them), settles the delivery as failed with the reason
// (journal.Shape.Error), cut to lifecycle.MaxErrorTextLength, as a
// reason to cancel is: either may quote the payload.
func (t Transforms) Shape(target string, m Message, in *Input, maxPayload int64) *Shaped {
	p := t[target]
	if p == nil {
		return nil
	}
	s, err := p.Transform(m, in, maxPayload)
	if err != nil {
		return &Shaped{Shape: journal.Shape{Error: lifecycle.Cut(err.Error(), lifecycle.MaxErrorTextLength)}}
	}
	s.Cancel = lifecycle.Cut(s.Cancel, lifecycle.MaxErrorTextLength)
	if s.Shape.PayloadSHA256 == "" && s.Shape.Method == "" && s.Shape.Path == "" && len(s.Shape.Headers) == 0 && s.Shape.Cancel == "" {
		return nil
	}
	return &s
}

// Transform runs a transform on in, the input of m: what it makes of a
// delivery of m, or why it cannot be sent (an error at run time, the cost
// limit passed, a key or value not allowed, a payload over maxPayload
// bytes).
func (p *Program) Transform(m Message, in *Input, maxPayload int64) (Shaped, error) {
	out, err := p.run(in, false)
	if err != nil {
		return Shaped{}, err
	}
	got, err := members(out)
	if err != nil {
		return Shaped{}, err
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if !slices.Contains(transformKeys, k) {
			return Shaped{}, fmt.Errorf("yields the key %q: allowed are %s", k, strings.Join(transformKeys, ", "))
		}
	}
	var s Shaped
	if c, ok := got["cancel"]; ok {
		reason, ok := c.(types.String)
		switch {
		case !ok || strings.TrimSpace(string(reason)) == "":
			return Shaped{}, fmt.Errorf("cancel must be a reason, a string that is not blank")
		case len(got) > 1:
			return Shaped{}, fmt.Errorf("cancel comes alone: a delivery that is not sent has nothing to send")
		}
		s.Cancel = string(reason)
		return s, nil
	}
	if err := shapePayload(&s, m, got, maxPayload); err != nil {
		return Shaped{}, err
	}
	if s.Headers, err = shapeHeaders(got["headers"]); err != nil {
		return Shaped{}, err
	}
	if s.Path, err = stringKey(got, "path"); err != nil {
		return Shaped{}, err
	}
	if err := CheckPath(s.Path); err != nil {
		return Shaped{}, err
	}
	if s.Method, err = stringKey(got, "method"); err != nil {
		return Shaped{}, err
	}
	if s.Method != "" && !slices.Contains(Methods, s.Method) {
		return Shaped{}, fmt.Errorf("method %q: allowed are %s", s.Method, strings.Join(Methods, ", "))
	}
	return s, nil
}

// members are the entries of the map a transform yields, by key; nothing
// of their values is converted yet.
func members(out ref.Val) (map[string]ref.Val, error) {
	m, ok := out.(traits.Mapper)
	if !ok {
		return nil, fmt.Errorf("yields %s, not a map", out.Type())
	}
	got := map[string]ref.Val{}
	for it := m.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		key, ok := k.(types.String)
		if !ok {
			return nil, fmt.Errorf("yields the key %v, which is not a string", k)
		}
		got[string(key)], _ = m.Find(k)
	}
	return got, nil
}

// shapePayload sets the payload the transform yields, with its content
// type, where it differs from the message's: a string is sent as it is
// (text/plain unless content_type says otherwise), any other value as
// JSON (application/json unless content_type says otherwise); either at
// most maxPayload bytes.
func shapePayload(s *Shaped, m Message, got map[string]ref.Val, maxPayload int64) error {
	contentType, err := stringKey(got, "content_type")
	if err != nil {
		return err
	}
	v, ok := got["payload"]
	if !ok {
		if contentType != "" {
			return fmt.Errorf("content_type is the payload's: it needs a payload")
		}
		return nil
	}
	if contentType != "" {
		if _, _, err := mime.ParseMediaType(contentType); err != nil || strings.ContainsFunc(contentType, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return fmt.Errorf("content_type %q is not a media type", contentType)
		}
	}
	tooLarge := fmt.Errorf("payload: more than %d bytes, the most a payload may have", maxPayload)
	var body []byte
	if text, ok := v.(types.String); ok {
		if int64(len(text)) > maxPayload {
			return tooLarge
		}
		body = []byte(text)
		if contentType == "" {
			contentType = "text/plain; charset=utf-8"
		}
	} else {
		size := jsonSize(v, int(maxPayload))
		if size > int(maxPayload) {
			return tooLarge
		}
		if body, err = appendJSON(make([]byte, 0, size), v, int(maxPayload)); errors.Is(err, errTooLarge) {
			return tooLarge
		} else if err != nil {
			return fmt.Errorf("payload: %w", err)
		}
		if contentType == "" {
			contentType = "application/json"
		}
	}
	if contentType == m.ContentType && string(body) == string(m.Payload) {
		return nil
	}
	sum := sha256.Sum256(body)
	s.Body, s.ContentType, s.PayloadSize, s.PayloadSHA256 = body, contentType, int64(len(body)), hex.EncodeToString(sum[:])
	return nil
}

// escaped reports a rune encoding/json writes otherwise than as it is.
func escaped(r rune) bool {
	return r < ' ' || r == '"' || r == '\\' || r == '<' || r == '>' || r == '&' || r >= utf8.RuneSelf
}

// jsonSize is the least v takes as JSON (appendJSON), counted until it
// passes max: so a payload that cannot fit is refused before any of it
// is written, and one that may is written where it fits.
func jsonSize(v ref.Val, max int) int {
	switch v := v.(type) {
	case types.String:
		return len(v) + 2
	case traits.Lister:
		n := 2
		for it := v.Iterator(); it.HasNext() == types.True && n <= max; {
			n += jsonSize(it.Next(), max-n) + 1
		}
		return n
	case traits.Mapper:
		n := 2
		for it := v.Iterator(); it.HasNext() == types.True && n <= max; {
			k := it.Next()
			e, _ := v.Find(k)
			n += jsonSize(k, max-n) + jsonSize(e, max-n) + 2
		}
		return n
	}
	return 1
}

// errTooLarge is JSON that would pass its bound.
var errTooLarge = errors.New("too large")

// appendJSON appends v to b as JSON, as encoding/json writes the value
// cel-go converts it to (a google.protobuf.Value: a map's keys in order,
// bytes in base64, a timestamp in RFC 3339), but an integer as it is, not
// as a double; or fails with errTooLarge once b would pass max bytes,
// before a string is copied or a list or map walked further: jsonSize
// counts no escapes, which may take a payload it let through past max.
func appendJSON(b []byte, v ref.Val, max int) ([]byte, error) {
	switch v := v.(type) {
	case types.Int:
		b = strconv.AppendInt(b, int64(v), 10)
	case types.Uint:
		b = strconv.AppendUint(b, uint64(v), 10)
	case types.String:
		if len(b)+len(v)+2 > max {
			return nil, errTooLarge
		}
		if strings.ContainsFunc(string(v), escaped) {
			text, _ := json.Marshal(string(v)) // a string always encodes
			b = append(b, text...)
		} else {
			b = append(append(append(b, '"'), v...), '"')
		}
	case traits.Lister:
		b = append(b, '[')
		for i, it := 0, v.Iterator(); it.HasNext() == types.True; i++ {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, it.Next(), max); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	case traits.Mapper:
		var keys []string
		for it := v.Iterator(); it.HasNext() == types.True; {
			k, ok := it.Next().(types.String)
			if !ok {
				return nil, fmt.Errorf("a map's key must be a string")
			}
			keys = append(keys, string(k))
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, types.String(k), max); err != nil {
				return nil, err
			}
			b = append(b, ':')
			e, _ := v.Find(types.String(k))
			if b, err = appendJSON(b, e, max); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	case *types.Err:
		return nil, v.Unwrap()
	default:
		pb, err := v.ConvertToNative(reflect.TypeFor[*structpb.Value]())
		if err != nil {
			return nil, fmt.Errorf("a value that is not JSON: %w", err)
		}
		text, err := json.Marshal(pb.(*structpb.Value).AsInterface())
		if err != nil {
			return nil, err
		}
		b = append(b, text...)
	}
	if len(b) > max {
		return nil, errTooLarge
	}
	return b, nil
}

// shapeHeaders checks the headers a transform yields as a message's are
// checked, names lower case, and refuses those no message header may set
// on an attempt (targets.ForwardReserved).
func shapeHeaders(v ref.Val) (map[string]string, error) {
	if v == nil || v == types.NullValue {
		return nil, nil
	}
	raw, ok := v.(traits.Mapper)
	if !ok {
		return nil, fmt.Errorf("headers must be a map of strings")
	}
	h := map[string]string{}
	for it := raw.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		name, ok := k.(types.String)
		if !ok {
			return nil, fmt.Errorf("headers must be a map of strings")
		}
		value, _ := raw.Find(k)
		text, ok := value.(types.String)
		if !ok {
			return nil, fmt.Errorf("the header %q must be a string", name)
		}
		h[string(name)] = string(text)
	}
	h, err := lifecycle.LowerHeaders("headers", h)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(h)) {
		if targets.ForwardReserved(name) {
			return nil, fmt.Errorf("the header %q is reserved: content-type, content-length, host, idempotency-key, webhook-*, waybill-*, "+
				"the hop-by-hop headers and the trace context's are Waybill's", name)
		}
	}
	return h, nil
}

// stringKey is the string at key, "" when there is none.
func stringKey(got map[string]ref.Val, key string) (string, error) {
	v, ok := got[key]
	if !ok {
		return "", nil
	}
	s, ok := v.(types.String)
	if !ok {
		return "", fmt.Errorf("%s must be a string", key)
	}
	return string(s), nil
}

// CheckPath checks a path a transform appends to its target's URL path:
// empty, or segments each starting with / of the characters a path may
// hold unescaped (but ;) or percent-escaped, and no query or fragment. No
// segment may be . or .., nor become a / or \ or a . or .. step as a
// receiver decodes it, once or more, or cuts it at a ; it decoded. So the
// path cannot leave the target's URL: no scheme, host or parent
// directory is reached from it, whatever the receiver's decoding.
func CheckPath(path string) error {
	if path == "" {
		return nil
	}
	if len(path) > maxPath {
		return fmt.Errorf("path must be at most %d bytes, got %d", maxPath, len(path))
	}
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("path %q must start with /", path)
	}
	for _, seg := range strings.Split(path[1:], "/") {
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			switch {
			case c == ';':
				return fmt.Errorf("path %q must not hold a ;, which some receivers read as the start of a path parameter", path)
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("-._~!$&'()*+,=:@", c) >= 0:
			case c == '%' && i+2 < len(seg) && isHex(seg[i+1]) && isHex(seg[i+2]):
				i += 2
			default:
				return fmt.Errorf("path %q holds %q: escape it as %%%02X", path, string(c), c)
			}
		}
		if err := checkSegment(path, seg); err != nil {
			return err
		}
	}
	return nil
}

// checkSegment refuses a segment of path that is a . or .. step, or
// becomes one, or a separator, as a receiver decodes it: each decoding is
// checked, until one changes nothing.
func checkSegment(path, seg string) error {
	for {
		// A receiver may read what comes before a ; as the step.
		for step := range strings.SplitSeq(seg, ";") {
			if step == "." || step == ".." {
				return fmt.Errorf("path %q must not have a . or .. segment, escaped or not", path)
			}
		}
		if strings.ContainsAny(seg, `/\`) {
			return fmt.Errorf("path %q must not hold an escaped / or \\ (%%2F, %%5C): some receivers decode it into a separator", path)
		}
		plain, err := url.PathUnescape(seg)
		if err != nil || plain == seg {
			return nil
		}
		seg = plain
	}
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
