package plugin

// Exported for plugin_test: the reply decoder and its protojson reference.
var (
	DecodeReply   = decodeReply
	DecodeViaJSON = decodeViaJSON
)
