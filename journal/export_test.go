package journal

// FastSamples are payloads of every kind with a fast decoder.
var FastSamples = fastSamples

// DecodesFast reports whether the fast decoder accepts data as a payload of
// kind.
func DecodesFast(kind Kind, data []byte) bool {
	p, ok := catalogue[kind]().(fastPayload)
	return ok && decodeFast(p, data)
}

// NewPayload returns an empty payload of kind.
func NewPayload(kind Kind) Payload { return catalogue[kind]() }

// QueueAs is Queue for a build of projections version projections.
var QueueAs = queueAs
