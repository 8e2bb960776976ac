// Included by the router's tests that run a tiny random-weight Llama.

/// Writes a tiny Llama GGUF with random weights: 2 layers, hidden 64, 4 heads over 2 KV
/// heads, vocabulary 96; Q4_1 layers, a Q8_0 embedding tied to the output.
fn tiny_gguf(path: &std::path::Path) {
    let (vocab, hidden, ffn, layers) = (96usize, 64usize, 128usize, 2usize);
    let mut seed = 7u64;
    let mut rand = |rows: usize, cols: usize, scale: f32| -> candle_core::Tensor {
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / 16_777_216.0 * 2.0 - 1.0) * scale
            })
            .collect();
        candle_core::Tensor::from_vec(v, (rows, cols), &candle_core::Device::Cpu).unwrap()
    };
    let q = |t: candle_core::Tensor, ty: candle_core::quantized::GgmlDType| candle_core::quantized::QTensor::quantize(&t, ty).unwrap();
    let mut tensors: Vec<(String, candle_core::quantized::QTensor)> = vec![
        ("token_embd.weight".into(), q(rand(vocab, hidden, 1.0), candle_core::quantized::GgmlDType::Q8_0)),
        (
            "output_norm.weight".into(),
            q(rand(1, hidden, 0.2).affine(1.0, 1.0).unwrap().squeeze(0).unwrap(), candle_core::quantized::GgmlDType::F32),
        ),
    ];
    for l in 0..layers {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        let norm = |r: &mut dyn FnMut(usize, usize, f32) -> candle_core::Tensor| {
            candle_core::quantized::QTensor::quantize(
                &r(1, hidden, 0.2).affine(1.0, 1.0).unwrap().squeeze(0).unwrap(),
                candle_core::quantized::GgmlDType::F32,
            )
            .unwrap()
        };
        tensors.push((n("attn_norm"), norm(&mut rand)));
        tensors.push((n("ffn_norm"), norm(&mut rand)));
        for (name, rows, cols) in [
            ("attn_q", hidden, hidden),
            ("attn_k", 32, hidden),
            ("attn_v", 32, hidden),
            ("attn_output", hidden, hidden),
            ("ffn_gate", ffn, hidden),
            ("ffn_up", ffn, hidden),
            ("ffn_down", hidden, ffn),
        ] {
            tensors.push((n(name), q(rand(rows, cols, 0.3), candle_core::quantized::GgmlDType::Q4_1)));
        }
    }
    use candle_core::quantized::gguf_file::Value as V;
    let md: Vec<(&str, V)> = vec![
        ("general.architecture", V::String("llama".into())),
        ("general.name", V::String("tiny random llama".into())),
        ("llama.block_count", V::U32(layers as u32)),
        ("llama.context_length", V::U32(256)),
        ("llama.embedding_length", V::U32(hidden as u32)),
        ("llama.feed_forward_length", V::U32(ffn as u32)),
        ("llama.attention.head_count", V::U32(4)),
        ("llama.attention.head_count_kv", V::U32(2)),
        ("llama.rope.freq_base", V::F32(10000.0)),
        ("llama.attention.layer_norm_rms_epsilon", V::F32(1e-5)),
    ];
    let md_refs: Vec<(&str, &V)> = md.iter().map(|(k, v)| (*k, v)).collect();
    let t_refs: Vec<(&str, &candle_core::quantized::QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    candle_core::quantized::gguf_file::write(&mut f, &md_refs, &t_refs).unwrap();
}

