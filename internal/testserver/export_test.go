package testserver

// EtcdGateway is etcdGateway for the external tests.
var EtcdGateway = etcdGateway
