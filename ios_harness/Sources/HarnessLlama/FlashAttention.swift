import llama

/// llama.cpp's flash attention setting for a context (`llama_context_params.flash_attn_type`).
public enum FlashAttention: String, Sendable {
    case off, on, auto

    var llama: llama_flash_attn_type {
        switch self {
        case .off: return LLAMA_FLASH_ATTN_TYPE_DISABLED
        case .on: return LLAMA_FLASH_ATTN_TYPE_ENABLED
        case .auto: return LLAMA_FLASH_ATTN_TYPE_AUTO
        }
    }
}
