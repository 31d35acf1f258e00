package inference

import (
	"testing"
)

// The processor must handle 100,000 inference spans/s on one core: under
// 10 µs each all told, so recognition should stay well under 2 µs.

func benchmarkRecognize(b *testing.B, f fixture, want Verdict) {
	r := newTestRecognizer(b)
	if _, v, reason := r.Recognize(f.span, f.res, now); v != want {
		b.Fatalf("verdict %v (%s), want %v", v, reason, want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r.Recognize(f.span, f.res, now)
	}
}

func BenchmarkRecognizeVLLM(b *testing.B) { benchmarkRecognize(b, vllmV1(), Recognized) }

func BenchmarkRecognizeVLLMWithGPUHints(b *testing.B) {
	f := vllmV1()
	f.res.Attributes().PutStr("CUDA_VISIBLE_DEVICES", "0,1,2,3")
	benchmarkRecognize(b, f, Recognized)
}

func BenchmarkRecognizeGenAI(b *testing.B)  { benchmarkRecognize(b, genAIChat(), Recognized) }
func BenchmarkRecognizeTGI(b *testing.B)    { benchmarkRecognize(b, tgiGenerate(), Recognized) }
func BenchmarkRecognizeTriton(b *testing.B) { benchmarkRecognize(b, tritonAllEvents(), Recognized) }
func BenchmarkRecognizeSGLang(b *testing.B) { benchmarkRecognize(b, sglangRoot(""), Recognized) }
func BenchmarkRecognizeSGLangSlice(b *testing.B) {
	benchmarkRecognize(b, sglangSlice("decode_forward", 0, ms), NotInference)
}
func BenchmarkRecognizeTRTLLM(b *testing.B) { benchmarkRecognize(b, trtllmRequest(), Recognized) }
func BenchmarkRecognizeHTTP(b *testing.B)   { benchmarkRecognize(b, httpSpan(), NotInference) }
