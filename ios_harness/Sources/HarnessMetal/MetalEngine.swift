#if canImport(Metal)
#endif
