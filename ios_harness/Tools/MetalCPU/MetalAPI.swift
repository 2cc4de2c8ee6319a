// The Metal API subset HarnessMetal uses, with Apple's names and signatures, so the engine's
// code compiles unchanged against this module (Linux) or Apple's Metal. Only what the engine and
// its tests call is declared; Tools/MetalStub.swift lists the same surface for the type check.

/// A GPU (here: the CPU, running MSL compiled by clang).
public protocol MTLDevice: AnyObject {
    /// The device's name.
    var name: String { get }
    /// The largest buffer this device creates; larger requests return nil.
    var maxBufferLength: Int { get }
    /// The memory the device can use without hurting performance (bytes).
    var recommendedMaxWorkingSetSize: UInt64 { get }
    /// Threadgroup size limit in each dimension.
    var maxThreadsPerThreadgroup: MTLSize { get }
    /// Whether the device belongs to a GPU family (feature set).
    func supportsFamily(_ gpuFamily: MTLGPUFamily) -> Bool
    /// A queue that runs command buffers in commit order.
    func makeCommandQueue() -> (any MTLCommandQueue)?
    /// Compiles MSL source; compiler errors are thrown with the compiler's messages.
    func makeLibrary(source: String, options: MTLCompileOptions?) throws -> any MTLLibrary
    /// A pipeline for one kernel function.
    func makeComputePipelineState(function: any MTLFunction) throws -> any MTLComputePipelineState
    /// A new zero-filled buffer, or nil (over `maxBufferLength`, or out of memory).
    func makeBuffer(length: Int, options: MTLResourceOptions) -> (any MTLBuffer)?
    /// A buffer over existing page-aligned memory of a page-multiple length, without copying.
    func makeBuffer(bytesNoCopy pointer: UnsafeMutableRawPointer, length: Int, options: MTLResourceOptions,
                    deallocator: ((UnsafeMutableRawPointer, Int) -> Void)?) -> (any MTLBuffer)?
}

public protocol MTLCommandQueue: AnyObject {
    /// A new command buffer on this queue.
    func makeCommandBuffer() -> (any MTLCommandBuffer)?
}

public protocol MTLCommandBuffer: AnyObject {
    /// A compute encoder recording into this command buffer.
    func makeComputeCommandEncoder(dispatchType: MTLDispatchType) -> (any MTLComputeCommandEncoder)?
    /// Submits the command buffer; it runs after the ones committed before it on its queue.
    func commit()
    /// Blocks until the command buffer has completed (or failed).
    func waitUntilCompleted()
    /// Where the command buffer is in its life.
    var status: MTLCommandBufferStatus { get }
    /// Why it failed, when `status` is `.error`.
    var error: (any Error)? { get }
    /// Host time (seconds, the trial clock's base) when the GPU started it; 0 until completed.
    var gpuStartTime: Double { get }
    /// Host time (seconds) when the GPU finished it; 0 until completed.
    var gpuEndTime: Double { get }
}

public protocol MTLComputeCommandEncoder: AnyObject {
    /// The kernel later dispatches run.
    func setComputePipelineState(_ state: any MTLComputePipelineState)
    /// Binds `buffer` at `offset` to `[[buffer(index)]]`.
    func setBuffer(_ buffer: (any MTLBuffer)?, offset: Int, index: Int)
    /// Copies `length` bytes (at most 4 KiB) and binds them to `[[buffer(index)]]`.
    func setBytes(_ bytes: UnsafeRawPointer, length: Int, index: Int)
    /// Runs whole threadgroups.
    func dispatchThreadgroups(_ threadgroupsPerGrid: MTLSize, threadsPerThreadgroup: MTLSize)
    /// Runs exactly `threadsPerGrid` threads (edge threadgroups are smaller).
    func dispatchThreads(_ threadsPerGrid: MTLSize, threadsPerThreadgroup: MTLSize)
    /// Ends recording.
    func endEncoding()
}

public protocol MTLBuffer: AnyObject {
    /// The buffer's memory as the CPU sees it (not for private storage).
    func contents() -> UnsafeMutableRawPointer
    /// Its length in bytes.
    var length: Int { get }
}

public protocol MTLFunction: AnyObject {
    /// The function's name in the source.
    var name: String { get }
}

public protocol MTLLibrary: AnyObject {
    /// A kernel of the library by name, or nil.
    func makeFunction(name: String) -> (any MTLFunction)?
    /// Every kernel in the library.
    var functionNames: [String] { get }
}

public protocol MTLComputePipelineState: AnyObject {
    /// Threads of one SIMD-group.
    var threadExecutionWidth: Int { get }
    /// The largest threadgroup this pipeline runs.
    var maxTotalThreadsPerThreadgroup: Int { get }
}

public struct MTLSize: Sendable, Equatable {
    public var width, height, depth: Int
    public init(width: Int, height: Int, depth: Int) {
        self.width = width
        self.height = height
        self.depth = depth
    }
}

public enum MTLDispatchType: Sendable { case serial, concurrent }

public enum MTLCommandBufferStatus: UInt, Sendable {
    case notEnqueued = 0, enqueued, committed, scheduled, completed, error
}

public enum MTLMathMode: Int, Sendable { case safe = 0, relaxed, fast }

open class MTLCompileOptions: @unchecked Sendable {
    public init() {}
    open var mathMode: MTLMathMode = .fast
}

public struct MTLResourceOptions: OptionSet, Sendable {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    public static let storageModeShared = MTLResourceOptions([])
    public static let storageModeManaged = MTLResourceOptions(rawValue: 1 << 4)
    public static let storageModePrivate = MTLResourceOptions(rawValue: 2 << 4)
    public static let cpuCacheModeWriteCombined = MTLResourceOptions(rawValue: 1)
}

/// Apple's GPU families with their raw values.
public enum MTLGPUFamily: Int, Sendable {
    case apple1 = 1001, apple2, apple3, apple4, apple5, apple6, apple7, apple8, apple9
    case mac2 = 2002
    case common1 = 3001, common2, common3
    case metal3 = 5001
}

/// The process's default device: MetalCPU's emulated GPU with its default configuration.
public func MTLCreateSystemDefaultDevice() -> (any MTLDevice)? { MetalCPUDevice.systemDefault }
