#include <stdio.h>
#include <stdint.h>
#include <string.h>
typedef uint64_t u64;
static void setrm(unsigned rm){asm volatile("fsrm %0"::"r"(rm)); asm volatile("fsflags zero");}
static unsigned fl(void){unsigned f; asm volatile("frflags %0":"=r"(f)); return f;}
#define S2(ins) do{ asm volatile("fmv.w.x ft0,%1\n fmv.w.x ft1,%2\n " ins " ft2,ft0,ft1\n fmv.x.w %0,ft2":"=r"(r):"r"(a),"r"(b):"ft0","ft1","ft2"); r&=0xffffffffu;}while(0)
#define D2(ins) do{ asm volatile("fmv.d.x ft0,%1\n fmv.d.x ft1,%2\n " ins " ft2,ft0,ft1\n fmv.x.d %0,ft2":"=r"(r):"r"(a),"r"(b):"ft0","ft1","ft2");}while(0)
#define S3(ins) do{ asm volatile("fmv.w.x ft0,%1\n fmv.w.x ft1,%2\n fmv.w.x ft3,%3\n " ins " ft2,ft0,ft1,ft3\n fmv.x.w %0,ft2":"=r"(r):"r"(a),"r"(b),"r"(c):"ft0","ft1","ft2","ft3"); r&=0xffffffffu;}while(0)
#define D3(ins) do{ asm volatile("fmv.d.x ft0,%1\n fmv.d.x ft1,%2\n fmv.d.x ft3,%3\n " ins " ft2,ft0,ft1,ft3\n fmv.x.d %0,ft2":"=r"(r):"r"(a),"r"(b),"r"(c):"ft0","ft1","ft2","ft3");}while(0)
#define S1(ins) do{ asm volatile("fmv.w.x ft0,%1\n " ins " ft2,ft0\n fmv.x.w %0,ft2":"=r"(r):"r"(a):"ft0","ft2"); r&=0xffffffffu;}while(0)
#define D1(ins) do{ asm volatile("fmv.d.x ft0,%1\n " ins " ft2,ft0\n fmv.x.d %0,ft2":"=r"(r):"r"(a):"ft0","ft2");}while(0)
#define SX(ins) do{ asm volatile("fmv.w.x ft0,%1\n " ins " %0,ft0":"=r"(r):"r"(a):"ft0");}while(0)
#define DX(ins) do{ asm volatile("fmv.d.x ft0,%1\n " ins " %0,ft0":"=r"(r):"r"(a):"ft0");}while(0)
#define SX2(ins) do{ asm volatile("fmv.w.x ft0,%1\n fmv.w.x ft1,%2\n " ins " %0,ft0,ft1":"=r"(r):"r"(a),"r"(b):"ft0","ft1");}while(0)
#define DX2(ins) do{ asm volatile("fmv.d.x ft0,%1\n fmv.d.x ft1,%2\n " ins " %0,ft0,ft1":"=r"(r):"r"(a),"r"(b):"ft0","ft1");}while(0)
#define XS(ins) do{ asm volatile(ins " ft2,%1\n fmv.x.w %0,ft2":"=r"(r):"r"(a):"ft2"); r&=0xffffffffu;}while(0)
#define XD(ins) do{ asm volatile(ins " ft2,%1\n fmv.x.d %0,ft2":"=r"(r):"r"(a):"ft2");}while(0)
int main(void){
  char op[32]; unsigned rm; u64 a,b,c;
  while(scanf("%31s %u %lx %lx %lx",op,&rm,&a,&b,&c)==5){
    u64 r=0; setrm(rm);
#define C(name, body) if(!strcmp(op,name)){body;} else
    C("f32_add",S2("fadd.s")) C("f32_sub",S2("fsub.s")) C("f32_mul",S2("fmul.s")) C("f32_div",S2("fdiv.s"))
    C("f64_add",D2("fadd.d")) C("f64_sub",D2("fsub.d")) C("f64_mul",D2("fmul.d")) C("f64_div",D2("fdiv.d"))
    C("f32_min",S2("fmin.s")) C("f32_max",S2("fmax.s")) C("f64_min",D2("fmin.d")) C("f64_max",D2("fmax.d"))
    C("f32_sqrt",S1("fsqrt.s")) C("f64_sqrt",D1("fsqrt.d"))
    C("f32_fmadd",S3("fmadd.s")) C("f32_fmsub",S3("fmsub.s")) C("f32_fnmsub",S3("fnmsub.s")) C("f32_fnmadd",S3("fnmadd.s"))
    C("f64_fmadd",D3("fmadd.d")) C("f64_fmsub",D3("fmsub.d")) C("f64_fnmsub",D3("fnmsub.d")) C("f64_fnmadd",D3("fnmadd.d"))
    C("f32_eq",SX2("feq.s")) C("f32_lt",SX2("flt.s")) C("f32_le",SX2("fle.s"))
    C("f64_eq",DX2("feq.d")) C("f64_lt",DX2("flt.d")) C("f64_le",DX2("fle.d"))
    C("f32_classify",SX("fclass.s")) C("f64_classify",DX("fclass.d"))
    C("f32_to_i32",SX("fcvt.w.s")) C("f32_to_u32",SX("fcvt.wu.s")) C("f32_to_i64",SX("fcvt.l.s")) C("f32_to_u64",SX("fcvt.lu.s"))
    C("f64_to_i32",DX("fcvt.w.d")) C("f64_to_u32",DX("fcvt.wu.d")) C("f64_to_i64",DX("fcvt.l.d")) C("f64_to_u64",DX("fcvt.lu.d"))
    C("i32_to_f32",XS("fcvt.s.w")) C("u32_to_f32",XS("fcvt.s.wu")) C("i64_to_f32",XS("fcvt.s.l")) C("u64_to_f32",XS("fcvt.s.lu"))
    C("i32_to_f64",XD("fcvt.d.w")) C("u32_to_f64",XD("fcvt.d.wu")) C("i64_to_f64",XD("fcvt.d.l")) C("u64_to_f64",XD("fcvt.d.lu"))
    C("f32_to_f64",{ asm volatile("fmv.w.x ft0,%1\n fcvt.d.s ft2,ft0\n fmv.x.d %0,ft2":"=r"(r):"r"(a):"ft0","ft2"); })
    C("f64_to_f32",{ asm volatile("fmv.d.x ft0,%1\n fcvt.s.d ft2,ft0\n fmv.x.w %0,ft2":"=r"(r):"r"(a):"ft0","ft2"); r&=0xffffffffu; })
    { printf("unknown %s\n",op); return 1; }
    unsigned f=fl();
    printf("%s %u %lx %lx %lx %lx %x\n",op,rm,a,b,c,r,f);
  }
  return 0;
}
