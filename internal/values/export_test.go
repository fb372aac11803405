package values

// LookupPath is lookupPath, for the external tests.
var LookupPath = lookupPath
