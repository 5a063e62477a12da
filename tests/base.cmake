# tests of the base layer (base/): what every layer above shares
cgc_c_test(test_text cgc_base)
