// A stand-in for Apple's Metal module, declaring only what HarnessMetal uses, with Apple's
// signatures as documented. Used to type-check HarnessMetal on Linux; it runs nothing.
import Foundation
public typealias CFTimeInterval = Double
public protocol MTLDevice: AnyObject {
    var name: String { get }
    var maxBufferLength: Int { get }
    var recommendedMaxWorkingSetSize: UInt64 { get }
    func supportsFamily(_ gpuFamily: MTLGPUFamily) -> Bool
    func makeCommandQueue() -> (any MTLCommandQueue)?
    func makeLibrary(source: String, options: MTLCompileOptions?) throws -> any MTLLibrary
    func makeComputePipelineState(function: any MTLFunction) throws -> any MTLComputePipelineState
    func makeBuffer(length: Int, options: MTLResourceOptions) -> (any MTLBuffer)?
    func makeBuffer(bytesNoCopy pointer: UnsafeMutableRawPointer, length: Int, options: MTLResourceOptions,
                    deallocator: ((UnsafeMutableRawPointer, Int) -> Void)?) -> (any MTLBuffer)?
}
public func MTLCreateSystemDefaultDevice() -> (any MTLDevice)? { nil }
public protocol MTLCommandQueue: AnyObject { func makeCommandBuffer() -> (any MTLCommandBuffer)? }
public enum MTLDispatchType { case serial, concurrent }
public enum MTLCommandBufferStatus { case notEnqueued, enqueued, committed, scheduled, completed, error }
public protocol MTLCommandBuffer: AnyObject {
    func makeComputeCommandEncoder(dispatchType: MTLDispatchType) -> (any MTLComputeCommandEncoder)?
    func commit()
    func waitUntilCompleted()
    var status: MTLCommandBufferStatus { get }
    var error: (any Error)? { get }
    var gpuStartTime: CFTimeInterval { get }
    var gpuEndTime: CFTimeInterval { get }
}
public struct MTLSize { public var width, height, depth: Int
    public init(width: Int, height: Int, depth: Int) { self.width = width; self.height = height; self.depth = depth } }
public protocol MTLComputeCommandEncoder: AnyObject {
    func setComputePipelineState(_ state: any MTLComputePipelineState)
    func setBuffer(_ buffer: (any MTLBuffer)?, offset: Int, index: Int)
    func setBytes(_ bytes: UnsafeRawPointer, length: Int, index: Int)
    func dispatchThreadgroups(_ threadgroupsPerGrid: MTLSize, threadsPerThreadgroup: MTLSize)
    func dispatchThreads(_ threadsPerGrid: MTLSize, threadsPerThreadgroup: MTLSize)
    func endEncoding()
}
public protocol MTLBuffer: AnyObject { func contents() -> UnsafeMutableRawPointer; var length: Int { get } }
public protocol MTLFunction: AnyObject {}
public protocol MTLLibrary: AnyObject { func makeFunction(name: String) -> (any MTLFunction)? }
public protocol MTLComputePipelineState: AnyObject {
    var threadExecutionWidth: Int { get }
    var maxTotalThreadsPerThreadgroup: Int { get }
}
public enum MTLGPUFamily: Int {
    case apple1 = 1001, apple2, apple3, apple4, apple5, apple6, apple7, apple8, apple9
    case mac2 = 2002
    case common1 = 3001, common2, common3
    case metal3 = 5001
}
public enum MTLMathMode { case safe, relaxed, fast }
open class MTLCompileOptions { public init() {}; open var mathMode: MTLMathMode = .fast }
public struct MTLResourceOptions: OptionSet, Sendable {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    public static let storageModeShared = MTLResourceOptions(rawValue: 0)
    public static let storageModePrivate = MTLResourceOptions(rawValue: 32)
}
