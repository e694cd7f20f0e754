"""Independent pure-Python oracles the tests check the engine and its vectors against."""
