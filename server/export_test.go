package server

// ClientIdentity is clientIdentity, for the tests of package server_test.
var ClientIdentity = clientIdentity
