// A behavioural model of the ECP5 DP16KD block RAM, for simulating rnic.hdl.prim.outreg_ram's ECP5
// form (yosys ships DP16KD as a blackbox only). It covers what outreg_ram uses and stops on the rest:
// port A writes and port B reads, both ports of one DATA_WIDTH (36, 18, 9, 4, 2 or 1 bits), REGMODE_B
// NOREG or OUTREG, no chip selects or resets. At 36 bits a word is {DIB, DIA} / {DOB, DOA}, the four
// byte enables are ADA3..ADA0, and REGMODE_A must equal REGMODE_B and OCEA equal OCEB. A read stage
// (CEB) takes the entry at ADB from the writes of earlier edges; a read of the entry written at the
// same edge gives random bits. With OUTREG the output register takes the read stage at edges with
// OCEB, which must not be high while CEB is low (outreg_ram's rule: the silicon's behaviour there is
// not relied on).
module DP16KD(
  input DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0,
  input ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0,
  input CEA, OCEA, CLKA, WEA, RSTA,
  input CSA2, CSA1, CSA0,
  output DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0,
  input DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0,
  input ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0,
  input CEB, OCEB, CLKB, WEB, RSTB,
  input CSB2, CSB1, CSB0,
  output DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0
);
  parameter DATA_WIDTH_A = 18;
  parameter DATA_WIDTH_B = 18;
  parameter REGMODE_A = "NOREG";
  parameter REGMODE_B = "NOREG";
  parameter RESETMODE = "SYNC";
  parameter ASYNC_RESET_RELEASE = "SYNC";
  parameter CSDECODE_A = "0b000";
  parameter CSDECODE_B = "0b000";
  parameter WRITEMODE_A = "NORMAL";
  parameter WRITEMODE_B = "NORMAL";
  parameter GSR = "ENABLED";

  localparam W = DATA_WIDTH_A;
  localparam LOW = W == 36 ? 5 : W == 18 ? 4 : W == 9 ? 3 : W == 4 ? 2 : W == 2 ? 1 : 0;
  localparam DEPTH = 1 << (14 - LOW);

  wire [17:0] dib = {DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0};
  wire [35:0] din = {dib, dia};
  wire [17:0] dia = {DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0};
  wire [13:0] ada = {ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0};
  wire [13:0] adb = {ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0};
  wire [13 - LOW:0] wa = ada[13:LOW];
  wire [13 - LOW:0] ra = adb[13:LOW];

  reg [W - 1:0] mem [0:DEPTH - 1];
  reg [35:0] latch = 36'd0;
  reg [35:0] oreg = 36'd0;
  wire [35:0] dout = REGMODE_B == "OUTREG" ? oreg : latch;
  wire [17:0] dob = W == 36 ? dout[35:18] : dout[17:0];
  assign {DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0} = dob;
  assign {DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0} = W == 36 ? dout[17:0] : 18'd0;

  initial begin
    if (DATA_WIDTH_A != DATA_WIDTH_B || !(W == 36 || W == 18 || W == 9 || W == 4 || W == 2 || W == 1)) begin
      $display("DP16KD model: DATA_WIDTH_A %0d, DATA_WIDTH_B %0d not covered", DATA_WIDTH_A, DATA_WIDTH_B);
      $fatal;
    end
    if (REGMODE_A != (W == 36 ? REGMODE_B : "NOREG") || !(REGMODE_B == "NOREG" || REGMODE_B == "OUTREG")) begin
      $display("DP16KD model: REGMODE not covered");
      $fatal;
    end
  end

  always @(posedge CLKA) begin
    if (CEA && WEA && (W != 18 || (ada[0] && ada[1])) && (W != 36 || ada[3:0] == 4'hf))
      mem[wa] <= din[W - 1:0];
    else if (CEA && WEA && W >= 18 && ada[3:0] != 4'h0 && ada[3:0] != (W == 18 ? 4'h3 : 4'hf)) begin
      $display("DP16KD model: partial byte enables not covered");
      $fatal;
    end
  end

  always @(posedge CLKB) begin
    if (WEB || RSTB || CSB0 || CSB1 || CSB2 || RSTA || CSA0 || CSA1 || CSA2) begin
      $display("DP16KD model: WEB, RSTx or CSx high");
      $fatal;
    end
    if (W == 36 && OCEA != OCEB) begin
      $display("DP16KD model: OCEA differs from OCEB at 36 bits");
      $fatal;
    end
    if (OCEB && !CEB && REGMODE_B == "OUTREG") begin
      $display("DP16KD model: OCEB high while CEB is low");
      $fatal;
    end
    if (CEB) begin
      if (CEA && WEA && wa == ra)
        latch <= $random;
      else
        latch <= mem[ra];
    end
    if (OCEB)
      oreg <= latch;
  end
endmodule
