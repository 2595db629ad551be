package core

import "github.com/nubes-io/nubes/pkg/freeform"

// Object is a free-form JSON object as stored (options, data, filters):
// its keys are kept as written, dots and a leading $ included, and it
// reads back as plain maps and slices (pkg/freeform). Tags and
// additional_info are freeform.Flat: a query's tags.<key> names one key.
type Object = freeform.Map
