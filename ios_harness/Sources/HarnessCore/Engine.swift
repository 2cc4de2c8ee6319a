/// A loaded model behind one runtime: what the trial runner drives.
///
/// Token positions are implicit: `prefill` starts at position 0 after `reset`, and every
/// `decode` appends one position. Engines return the greedy next token so the runner never
/// touches logits inside a timed region.
public protocol Engine: AnyObject {
    /// Engine name as specs spell it (`rawloop-cpu`).
    var name: String { get }
    /// Version of the engine code and its kernels, recorded in every result.
    var version: String { get }
    /// Largest number of positions (prompt + generated) the KV cache holds.
    var contextLength: Int { get }
    /// Size of the vocabulary; prompt ids must be below it.
    var vocabSize: Int { get }
    /// Threads the engine runs on, if it runs on CPU threads.
    var threads: Int? { get }
    /// Weight bytes read to produce one decode token.
    var bytesPerDecodeToken: Int { get }
    /// Weight bytes read per prompt token when prefilling at chunk width `chunkWidth`.
    func bytesPerPrefillToken(chunkWidth: Int) -> Int
    /// Forget every position (empty KV cache).
    func reset()
    /// Runs the prompt from position 0 in chunks of `chunkWidth` and returns the greedy next token.
    func prefill(_ tokens: [Int32], chunkWidth: Int) throws -> Int32
    /// Appends `token` at the next position and returns the greedy next token.
    func decode(_ token: Int32) throws -> Int32
}
