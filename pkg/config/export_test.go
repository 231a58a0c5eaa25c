package config

// Update is the -update flag, for the tests of package config_test.
var Update = update
