# s42_f.sh: s42_d.sh's correctness checks alone (~360 s: the device budget left after
# refused starts): gpu_prefill (fp8 KV, 192/128, lse base 2), gpu_decode (lse base 2, the
# tensor-core route with fp8), tvm_abi_check.py, llama_check.sh. Build and carry as
# s42_d.sh's header says (build-gpu6, lab/gpu/wheels).
SHORT=1 exec bash lab/gpu/s42_d.sh
