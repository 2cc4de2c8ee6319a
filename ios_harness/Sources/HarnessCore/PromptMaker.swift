/// Makes the prompt of a spec that gives no `prompt_ids`: a SplitMix64 stream from `seed`,
/// each id = next() % vocab. Any side can reproduce it from the spec alone.
public enum PromptMaker {
    public static func ids(seed: Int, count: Int, vocab: Int) -> [Int] {
        var state = UInt64(bitPattern: Int64(seed))
        var out: [Int] = []
        out.reserveCapacity(count)
        for _ in 0..<count {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            out.append(Int(z % UInt64(vocab)))
        }
        return out
    }
}
